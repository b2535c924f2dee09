"""The benchmark scripts run: their --help explains, and the batching benchmark runs end to end on a slice of a real
corpus with a tiny model (its figures are not checked: speed lives in benchmarks, not tests). The Multi30k bench
fetches every file it trains on and scores against before training (from a file:// upstream here), stops before
training when one is missing, and stops its training with it when stopped, each time with a one-line error."""

import collections
import gzip
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = ["attention_scaling", "batching", "decode_speed", "decode_sweep", "fit_teardown", "loss_speed", "multi30k",
           "multi30k_jax", "profile_step", "resume_stream", "step_variants", "train_throughput"]


def bench_env():
    """The environment for a bench subprocess, with $KMT_DATA_DIR (if set) made absolute so that any cwd works."""
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}
    if env.get("KMT_DATA_DIR"):
        env["KMT_DATA_DIR"] = str(Path(env["KMT_DATA_DIR"]).resolve())
    return env


def run_bench(script, *args, timeout=600, cwd=BENCH.parent, env=None):
    """`python bench/<script>.py args...` in `bench_env()`, with `env`'s variables on top."""
    return subprocess.run([sys.executable, str(BENCH / f"{script}.py"), *args], capture_output=True, text=True,
                          timeout=timeout, env=bench_env() | (env or {}), cwd=cwd)


@pytest.fixture
def multi30k_head(tmp_path_factory, monkeypatch):
    """$KMT_DATA_DIR for the test: the first lines of the real Multi30k En-De files (raw and tok/), enough for a smoke
    run (`data.limit=300`), with val and test short enough that the benches' beam searches through their SavedModels
    take seconds, where all 1,014 and 1,000 sentences took a minute of a 2-core CI machine."""
    corpus = Path(os.environ["KMT_DATA_DIR"]) / "multi30k"
    head = tmp_path_factory.mktemp("data")
    for stem, lines in [("train", 400), ("val", 48), ("test_2016_flickr", 48)]:
        for lang in ("en", "de"):
            for name in (f"{stem}.{lang}", f"tok/{stem}.lc.norm.tok.{lang}"):
                path = head / "multi30k" / name
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(corpus / name, encoding="utf-8") as f:
                    path.write_text("".join(itertools.islice(f, lines)), encoding="utf-8")
    monkeypatch.setenv("KMT_DATA_DIR", str(head))
    return head


def test_every_script_is_listed():
    runnable = {path.stem for path in BENCH.glob("*.py") if 'if __name__ == "__main__"' in path.read_text()}
    assert runnable == set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_explains_and_exits_zero(script):
    result = run_bench(script, "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage:") and "--help" in result.stdout


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
def test_batching_benchmark_reports_every_width():
    result = run_bench("batching", "--widths", "0,1,3", "--steps", "2", "--repeats", "1", "debug=smoke",
                       "data.download=false")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "batching" and report["training_pairs"] <= 300  # data.limit=300 (smoke)
    rows = report["rows"]
    assert [row["bucket_width"] for row in rows] == [0, 1, 3]
    for row in rows:
        assert 0 < row["source_fill"] <= 1 and 0 < row["target_fill"] <= 1
        assert row["tokens_per_second"] > 0 and 0 < row["steps_per_epoch"] <= row["batches"]
    assert "| bucket width |" in result.stdout


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
def test_fit_teardown_benchmark_reports_both_settings():
    result = run_bench("fit_teardown", "--steps", "2", "--repeats", "1", "debug=smoke", "data.download=false")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "fit_teardown" and report["training_pairs"] <= 300
    assert [row["autotune"] for row in report["rows"]] == ["on", "off"]
    for row in report["rows"]:
        assert row["fits"] == 1 and row["whole_fit_ms_per_step"] >= row["ms_per_step"] > 0
        assert row["teardown_seconds"][0] >= 0 and 0 <= row["stalled_fits"] <= 1
    assert "| autotune |" in result.stdout


def test_profile_step_sums_a_traced_functions_ops_per_step_and_folds_their_scopes(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCH))
    import profile_step
    import tensorflow as tf

    a = tf.random.normal((256, 256))
    step = tf.function(lambda: tf.nn.relu(tf.matmul(a, a)))
    step()  # traced before the profiler starts, as the bench's warm-up fit is
    tf.profiler.experimental.start(str(tmp_path))
    for _ in range(2):
        step()
    tf.profiler.experimental.stop()
    times = profile_step.op_times(tmp_path, steps=2)
    by_type = profile_step.summed(times, lambda name: name.rsplit(":", 1)[1])
    assert by_type and all(ms > 0 for ms in by_type.values())
    assert any("MatMul" in op_type for op_type in by_type), by_type
    assert not any("::" in name for name in times)  # the executor's own events are left out
    assert profile_step.scope_of("StatefulPartitionedCall/gradient_tape/transformer_1/decoder_layer_2_1/"
                                 "feed_forward_1/MatMul:_MklMatMul") == "gradient_tape/transformer/decoder_layer_N"
    assert profile_step.scope_of("StatefulPartitionedCall/LogSoftmax:LogSoftmax") == "LogSoftmax"
    with pytest.raises(SystemExit, match="no trace"):
        profile_step.op_times(tmp_path / "empty", steps=1)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_speed_times_textbook_losses_that_compute_kmts_values(monkeypatch, eps):
    monkeypatch.syspath_prepend(str(BENCH))
    import loss_speed
    import numpy as np

    from kmt.losses import MaskedAccuracy, MaskedCrossEntropy, MaskedPerplexity

    rng = np.random.default_rng(0)
    y, logits = np.array([[4, 2, 0], [7, 1, 3]]), rng.normal(size=(2, 3, 9)).astype("float32")
    logits[1, 2] = logits[1, 2, 3] + 1  # a tie at the maximum: both argmax and top_k take the first index
    loss, (accuracy, perplexity) = loss_speed.textbook_losses(eps)
    assert float(loss(y, logits)) == pytest.approx(float(MaskedCrossEntropy(eps)(y, logits)), rel=1e-6)
    for textbook, ours in ((accuracy, MaskedAccuracy()), (perplexity, MaskedPerplexity())):
        textbook.update_state(y, logits)
        ours.update_state(y, logits)
        assert float(textbook.result()) == pytest.approx(float(ours.result()), rel=1e-6)
    assert 0 < float(accuracy.result()) < 1


def test_step_variants_merge_onto_the_base_and_refuse_data_changes_and_bad_values(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import step_variants
    from common import recipe_config

    base = recipe_config("multi30k_en_de")
    configs = step_variants.variant_configs(base, ["nodrop:model.attention_dropout=0,model.activation_dropout=0",
                                                   "fp32:trainer.precision=float32"])
    assert list(configs) == ["base", "nodrop", "fp32"]
    assert configs["nodrop"].model.attention_dropout == 0 and configs["nodrop"].model.dropout == base.model.dropout
    assert configs["fp32"].trainer.precision == "float32" and base.trainer.precision == "mixed_bfloat16"
    for spec, message in [("big:data.max_tokens=8192", "changes data settings"),
                          ("typo:model.dropuot=0.1", "model.dropuot"),
                          ("bad:model.dropout=1.5", "dropout")]:
        with pytest.raises(SystemExit, match=message):
            step_variants.variant_configs(base, [spec])
    with pytest.raises(SystemExit):
        step_variants.parse_args(["--variant", "base:model.dropout=0.2"])


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
def test_resume_stream_benchmark_times_both_streams():
    result = run_bench("resume_stream", "--epochs", "1", "--repeats", "2", "debug=smoke", "data.download=false",
                       "data.subword_sampling=0.5")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "resume_stream"
    assert [row["stream"] for row in report["rows"]] == ["best segmentation", "subword sampling (alpha 0.5)"]
    for row in report["rows"]:
        assert row["epochs"] == 2 and len(row["seconds"]) == 2 and row["seconds_per_epoch"] > 0
        assert row["batches_per_epoch"] > 0
    assert "| training stream |" in result.stdout


def test_train_throughput_streams_its_batches_without_tf_data_autotuning(monkeypatch):
    # Each of its fits releases the stream's iterator, which with autotuning on could idle 15-17 s (fit_teardown.py).
    monkeypatch.syspath_prepend(str(BENCH))
    import train_throughput

    batches = train_throughput.synthetic_batches(steps=2, batch_size=3, length=4, vocab_size=20, seed=0)
    data = train_throughput.keras_dataset(batches)
    assert data.options().autotune.enabled is False
    streamed = [(f["source"].numpy(), f["target_in"].numpy(), target_out.numpy()) for f, target_out in data.take(3)]
    expected = [batches[0], batches[1], batches[0]]  # repeated
    assert all((a == b).all() for got, want in zip(streamed, expected) for a, b in zip(got, want))


def test_hardware_tells_cpus_that_share_a_bare_name_apart(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    from common import hardware

    cores = len(os.sched_getaffinity(0))
    zen5 = "processor\t: 0\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 9\n"
    assert hardware(zen5) == f"{cores} x AMD EPYC (family 26, model 2)"
    named = "cpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\n"
    assert hardware(named) == f"{cores} x Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"


@pytest.mark.parametrize("script", ["batching", "fit_teardown", "train_throughput"])
def test_a_step_count_below_one_is_a_one_line_usage_error(script):
    result = run_bench(script, "--steps", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("error: --steps must be positive. Received: 0")


def _processes_in(directory):
    """PIDs of the processes whose working directory is `directory` (Linux's /proc)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")) == directory:
                pids.append(int(proc.name))
        except OSError:  # gone, or not ours to read
            pass
    return pids


# A smoke-sized multi30k run that would train for a long time, so that it is inside `fit` when the signal comes.
ENDLESS = ["debug=smoke", "data.download=false", "trainer.epochs=1000", "trainer.max_minutes=0"]


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR") or not Path("/proc/self/cwd").exists(),
                    reason="needs the real corpora in $KMT_DATA_DIR, and Linux's /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stopping_the_multi30k_bench_stops_its_training_and_says_how_to_resume(tmp_path, signum):
    # Before: SIGTERM ended the bench and left kmt-train training, orphaned, on the cores; Ctrl-C killed kmt-train
    # before it could save. Now the bench passes the signal on, kmt-train saves and stops, the bench waits for it and
    # prints the --resume command.
    bench = subprocess.Popen([sys.executable, str(BENCH / "multi30k.py"), "en_de", *ENDLESS], cwd=tmp_path,
                             env=bench_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as in a terminal
    runs = tmp_path / "runs" / "bench" / "multi30k_en_de"
    deadline = time.time() + 300
    while not list(runs.glob("*/checkpoints/backup/training_metadata.json")) and time.time() < deadline:
        assert bench.poll() is None, bench.stderr.read()[-2000:]
        time.sleep(0.05)
    bench.send_signal(signum)
    try:
        _, stderr = bench.communicate(timeout=120)
        left = _processes_in(tmp_path)
    finally:
        for pid in _processes_in(tmp_path):  # an orphaned kmt-train must not outlive the test
            os.kill(pid, signal.SIGKILL)
    assert bench.returncode == 128 + signum, stderr[-2000:]
    assert left == []
    (run_dir,) = runs.iterdir()
    last = stderr.strip().splitlines()[-1]
    assert "Traceback" not in stderr
    assert last == (f"error: stopped by {signum.name}; continue the run from its last completed epoch with: "
                    f"python bench/multi30k.py en_de --resume runs/bench/multi30k_en_de/{run_dir.name}")
    # kmt-train's own handling of the signal ran: the weights of the moment are saved
    assert (run_dir / "checkpoints" / "interrupted.weights.h5").exists()


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
def test_the_multi30k_bench_finishes_a_resumed_run_that_had_trained_all_its_epochs(tmp_path, multi30k_head):
    # As after a kill while the bench scored or exported: resuming trains nothing and prints the run's row. Before,
    # the row's tokens/s was kmt-train's own invocation's, none, and the bench failed with a traceback.
    run_dir = tmp_path / "runs" / "bench" / "multi30k_en_de" / "finished"
    trained = subprocess.run(
        [sys.executable, "-m", "kmt.cli.train", "experiment=multi30k_en_de", "debug=smoke", "data.download=false",
         "trainer.epochs=2", f"hydra.run.dir={run_dir}"], capture_output=True, text=True, timeout=600,
        env=bench_env(), cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-2000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())["train"]
    result = run_bench("multi30k", "en_de", "--resume", "runs/bench/multi30k_en_de/finished", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\n| direction | tok. BLEU | sacreBLEU | chrF |" in result.stdout
    row = json.loads(result.stdout.strip().splitlines()[-1])
    assert json.loads((run_dir / "bench.json").read_text()) == row
    assert row["epochs"] == 2 and 0 <= row["tokenized_bleu"] <= 100
    assert row["train_minutes"] == round(metrics["run_seconds"] / 60, 1)
    assert row["tokens_per_second"] == pytest.approx(metrics["tokens_per_second"], abs=1)  # the same epoch's


def multi30k_upstream(root, tok=True):
    """A file:// copy of the Multi30k repository (github multi30k/dataset) holding the first lines of the real En-De
    files, laid out as it is: `data/task1/raw/<stem>.<lang>.gz` and, with `tok`, `data/task1/tok/<file>` (not
    gzipped upstream); returns its URL."""
    corpus = Path(os.environ["KMT_DATA_DIR"]) / "multi30k"
    for stem, lines in [("train", 64), ("val", 16), ("test_2016_flickr", 16)]:
        for lang in ("en", "de"):
            for name, upstream in [(f"{stem}.{lang}", f"raw/{stem}.{lang}.gz"),
                                   (f"tok/{stem}.lc.norm.tok.{lang}", f"tok/{stem}.lc.norm.tok.{lang}")]:
                if upstream.startswith("tok/") and not tok:
                    continue
                with open(corpus / name, "rb") as f:
                    data = b"".join(itertools.islice(f, lines))
                path = root / "data" / "task1" / upstream
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return root.as_uri()


def upstream_text(url, name):
    """The text the upstream at `url` holds for `<data_dir>/multi30k/<name>` (raw files gunzipped)."""
    root = Path(url.removeprefix("file://")) / "data" / "task1"
    if name.startswith("tok/"):
        return (root / name).read_bytes()
    return gzip.decompress((root / "raw" / f"{name}.gz").read_bytes())


def files_under(folder):
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


RAW = [f"{stem}.{lang}" for stem in ("test_2016_flickr", "train", "val") for lang in ("de", "en")]
TOK = [f"tok/{stem}.lc.norm.tok.{lang}" for stem in ("test_2016_flickr", "train", "val") for lang in ("de", "en")]


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
def test_the_multi30k_bench_fetches_what_it_trains_on_and_scores_against_before_training(tmp_path, monkeypatch,
                                                                                         capsys):
    # Before, only kmt-train fetched, and only the files it trains on: the bench found no tok/ references to score
    # against once training had ended.
    url = multi30k_upstream(tmp_path / "upstream")
    monkeypatch.setenv("KMT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KMT_MULTI30K_URL", url)
    monkeypatch.syspath_prepend(str(BENCH))
    import multi30k

    folder = tmp_path / "data" / "multi30k"
    assert multi30k.prepare_corpus(multi30k.recipe("en_de", []), "en_de", tok_data=False) == str(tmp_path / "data")
    assert files_under(folder) == sorted([*RAW, "tok/test_2016_flickr.lc.norm.tok.de"])
    assert all((folder / name).read_bytes() == upstream_text(url, name) for name in files_under(folder))
    assert capsys.readouterr().out.splitlines() == [f"fetched {folder / name}" for name in [
        "train.en", "train.de", "val.en", "val.de", "test_2016_flickr.en", "test_2016_flickr.de",
        "tok/test_2016_flickr.lc.norm.tok.de"]]
    # --tok-data trains on the tok/ copies and still scores against the raw references: only tok/ is left to fetch.
    cfg = multi30k.recipe("en_de", ["data.tokenized=true"])
    multi30k.prepare_corpus(cfg, "en_de", tok_data=True)
    assert files_under(folder) == sorted([*RAW, *TOK])
    assert all((folder / name).read_bytes() == upstream_text(url, name) for name in files_under(folder))
    assert len(capsys.readouterr().out.splitlines()) == 5
    # Everything found: nothing is fetched, from an upstream that is not there.
    monkeypatch.setenv("KMT_MULTI30K_URL", (tmp_path / "nowhere").as_uri())
    multi30k.prepare_corpus(cfg, "en_de", tok_data=True)
    multi30k.prepare_corpus(multi30k.recipe("en_de", []), "en_de", tok_data=False)
    assert capsys.readouterr().out == ""


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
def test_the_multi30k_bench_runs_on_a_fresh_machine_from_the_upstream_alone(tmp_path):
    url = multi30k_upstream(tmp_path / "upstream")
    data = tmp_path / "data"
    result = run_bench("multi30k", "en_de", "debug=smoke", cwd=tmp_path,
                       env={"KMT_DATA_DIR": str(data), "KMT_MULTI30K_URL": url})
    assert result.returncode == 0, result.stderr[-3000:]
    row = json.loads(result.stdout.strip().splitlines()[-1])
    assert row["epochs"] == 1 and 0 <= row["tokenized_bleu"] <= 100 and 0 <= row["sacrebleu"] <= 100
    assert files_under(data / "multi30k") == sorted([*RAW, "tok/test_2016_flickr.lc.norm.tok.de"])


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
@pytest.mark.parametrize("flags, missing", [([], "test_2016_flickr.lc.norm.tok.de"),
                                            (["--tok-data"], "train.lc.norm.tok.en")], ids=["raw", "tok-data"])
def test_a_reference_the_upstream_lacks_stops_the_multi30k_bench_before_training(tmp_path, flags, missing):
    url = multi30k_upstream(tmp_path / "upstream", tok=False)
    data = tmp_path / "data"
    result = run_bench("multi30k", "en_de", *flags, cwd=tmp_path,
                       env={"KMT_DATA_DIR": str(data), "KMT_MULTI30K_URL": url})
    assert result.returncode != 0
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: could not download {url}/data/task1/tok/{missing} (URLError: "), line
    assert line.endswith(f"; place {missing} in {data}/multi30k/tok by hand"), line
    assert not (tmp_path / "runs").exists()  # kmt-train never started
    assert files_under(data) == ([] if flags else [f"multi30k/{name}" for name in RAW])  # no partial file either


def test_a_failed_training_ends_the_multi30k_bench_with_its_one_line_error(tmp_path):
    # The config is rejected before any corpus is read, so this needs no $KMT_DATA_DIR.
    result = run_bench("multi30k", "en_de", "debug=smoke", "trainer.epochs=0", timeout=300, cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == "error: trainer.epochs must be positive. Received: 0"


@pytest.mark.parametrize("bucket_width", [0, 1, 3])
def test_the_jax_bench_makes_kmt_trains_batches_padded_to_a_few_shapes(monkeypatch, bucket_width):
    # The same batches as kmt.data.pipeline (sizes, steps an epoch), each padded to one of a few fixed shapes.
    import numpy as np
    import tensorflow as tf

    from kmt.data.pipeline import EncodedSplit, count_batches

    monkeypatch.syspath_prepend(str(BENCH))
    import multi30k_jax

    rng = np.random.default_rng(0)
    source = [rng.integers(4, 50, size=n) for n in rng.integers(1, 40, size=500)]
    target = [rng.integers(4, 50, size=n) for n in rng.integers(1, 39, size=500)]
    batches = multi30k_jax.Batches(source, target, max_length=40, max_tokens=256, batch_size=8,
                                   bucket_width=bucket_width, shape_edges=(12, 24, 48))
    split = EncodedSplit(tf.ragged.constant(source), tf.ragged.constant(target), [], [], {})
    assert batches.steps_per_epoch == count_batches(split, 40, 256, 8, bucket_width, repeated=True)
    assert len(list(batches.one_pass())) == count_batches(split, 40, 256, 8, bucket_width)
    lengths = np.maximum([len(s) for s in source], [len(t) + 1 for t in target])
    stream, shapes = batches.stream(seed=1), set()
    for _ in range(3 * batches.steps_per_epoch):
        features, target_out = next(stream)
        shapes.add(target_out.shape)
        assert features["source"].shape == features["target_in"].shape == target_out.shape
        rows = np.flatnonzero(target_out[:, 0])  # every real pair has a first target position
        assert (target_out[rows[-1] + 1 :] == 0).all() and (features["source"][rows[-1] + 1 :] == 0).all()
        real = (features["source"][rows] > 0).sum(axis=1), (target_out[rows] > 0).sum(axis=1)
        assert (features["target_in"][rows, 0] == 2).all() and (target_out[rows, real[1] - 1] == 3).all()
        buckets = set(batches.bucket[np.flatnonzero(lengths == length)[0]] for length in np.maximum(*real))
        (bucket,) = buckets  # one bucket a batch, and as many pairs as kmt-train puts in its batches
        assert len(rows) == batches.sizes[bucket]
    assert {shape[1] for shape in shapes} <= {12, 24, 48}


def test_the_jax_bench_trains_on_sampled_draws_one_a_pass_in_the_shapes_of_all(monkeypatch):
    # Subword regularization on the accelerator: `prepare`'s draws, in turn; epochs sized by the first, as kmt-train's.
    import numpy as np
    import tensorflow as tf

    from kmt.data.pipeline import EncodedSplit, count_batches

    monkeypatch.syspath_prepend(str(BENCH))
    import multi30k_jax

    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 30, size=(2, 400))

    def segmentation(tag, stretch):  # every id of segmentation `tag` lies in [100 * tag, 100 * tag + 50)
        return [[rng.integers(100 * tag, 100 * tag + 50, size=min(n + stretch, 39)) for n in side] for side in lengths]

    best, *draws = segmentation(0, 0), segmentation(1, 0), segmentation(2, 3), segmentation(3, 9)
    best = [[ids + 4 for ids in side] for side in best]  # ids 0-3 are pad, unknown, start and end
    batches = multi30k_jax.Batches(*best, max_length=40, max_tokens=256, batch_size=8, bucket_width=1,
                                   shape_edges=(12, 24, 48), draws=draws)
    split = EncodedSplit(tf.ragged.constant(draws[0][0]), tf.ragged.constant(draws[0][1]), [], [], {})
    assert batches.steps_per_epoch == count_batches(split, 40, 256, 8, 1, repeated=True)
    assert all((features["source"] < 100).all() for features, _ in batches.one_pass())  # val: the best one
    shapes = {(rows, width) for rows, width in zip(batches.rows, batches.width) if rows}
    stream, seen = batches.stream(seed=1), collections.Counter()
    for _ in range(12 * batches.steps_per_epoch):
        features, target_out = next(stream)
        assert target_out.shape in shapes  # the longest draw makes no shape the compiled ones lack
        tags = set(np.unique(features["source"][features["source"] > 0] // 100))
        assert tags and tags <= {1, 2, 3}  # draws only, never the best segmentation
        seen.update(tags)
    assert all(count > 0.2 * sum(seen.values()) for count in seen.values())  # each draw has its share of passes


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
def test_the_jax_bench_trains_under_jax_and_exports_and_scores_here(tmp_path, multi30k_head):
    import numpy as np

    # The smoke vocabulary (323 pieces) spells sentences in up to 125 pieces, hence edges up to 128.
    prepared, trained = tmp_path / "prepared", tmp_path / "trained"
    # The GPU machines have JAX but no TensorFlow: here `import tensorflow` fails in `train` as it would there (and
    # each `train` process is spared the seconds that importing it takes).
    no_tensorflow = tmp_path / "no_tensorflow" / "tensorflow"
    no_tensorflow.mkdir(parents=True)
    (no_tensorflow / "__init__.py").write_text('raise ImportError("No module named \'tensorflow\'")\n')
    python_path = os.pathsep.join(filter(None, [str(no_tensorflow.parent), os.environ.get("PYTHONPATH")]))
    jax_env = {"KERAS_BACKEND": "jax", "PYTHONPATH": python_path}
    # The recipe samples segmentations (data.subword_sampling=0.5): `prepare` draws two for `train` to cycle through.
    result = run_bench("multi30k_jax", "prepare", "en_de", "debug=smoke", "data.download=false",
                       "trainer.precision=float32", "--draws", "2", "--out", str(prepared))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "subword sampling (alpha 0.5): 2 draws of the training split" in result.stdout
    misspelt = run_bench("multi30k_jax", "train", str(prepared), "--out", str(trained), "--job", "a:model.dropuot=0.1",
                         env=jax_env)
    assert misspelt.returncode == 1 and "Traceback" not in misspelt.stderr
    assert misspelt.stderr.strip().splitlines()[-1].startswith("error: --job a:model.dropuot=0.1: Key 'dropuot'")
    sampling = run_bench("multi30k_jax", "train", str(prepared), "--out", str(trained),
                         "--job", "a:data.subword_sampling=0.3", env=jax_env)
    assert sampling.returncode == 1 and "Traceback" not in sampling.stderr
    assert sampling.stderr.strip().splitlines()[-1] == (
        f"error: --job a:data.subword_sampling=0.3: data.subword_sampling=0.3 needs `prepare`'s draws at that "
        f"alpha, and {prepared} holds draws at alpha 0.5; prepare with data.subword_sampling=0.3, or set 0 to train "
        "on the best segmentation")
    for jobs, message in [
        (["a:trainer.epochs=0", "b"], "error: --job a:trainer.epochs=0: trainer.epochs must be positive. Received: 0"),
        (["a", "a:model.dropout=0.2"], "error: --job names must differ: each job writes its results under its name"),
    ]:
        rejected = run_bench("multi30k_jax", "train", str(prepared), "--out", str(trained), "--parallel",
                             *itertools.chain.from_iterable(("--job", job) for job in jobs), env=jax_env)
        assert rejected.returncode == 1 and "Traceback" not in rejected.stderr
        assert rejected.stderr.strip().splitlines()[-1] == message
    # A job that fails in its own process (here, unreadable ids) fails the whole call, in one last line.
    broken = tmp_path / "broken"
    shutil.copytree(prepared, broken)
    (broken / "ids.npz").write_bytes(b"not an npz file")
    failed = run_bench("multi30k_jax", "train", str(broken), "--out", str(trained), "--parallel",
                       "--job", "a", "--job", "b:model.dropout=0.2", env=jax_env)
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines()[-1] == "error: jobs failed: a (exit 1), b (exit 1); no job finished"
    assert not trained.exists()  # nothing trained, nothing written
    # --parallel: each job trains in a process of its own (`train` with that one job), and the results come together.
    training = run_bench(
        "multi30k_jax", "train", str(prepared), "--out", str(trained),
        "--job", "jobs:trainer.epochs=2,trainer.average_last=2,model.late_dropout_after=1,decode.beam_size=3,"
                 "decode.length_penalty=1.0",
        "--job", "other:model.dropout=0.0,model.late_dropout=null,data.subword_sampling=0",
        "--keep", "jobs", "--shape-edges", "32,64,128", "--parallel", "--decode", env=jax_env,
    )
    assert training.returncode == 0, training.stderr[-3000:]
    results = json.loads((trained / "results.json").read_text())
    assert results["backend"] == "jax"
    kept, other = results["jobs"]["jobs"], results["jobs"]["other"]  # a job named as --parallel once staged
    assert kept["epochs"] == 2 and kept["averaged_checkpoints"] == 2 and len(kept["history"]) == 2
    assert kept["config"]["model"]["dropout"] == 0.1 and other["config"]["model"]["dropout"] == 0.0
    assert kept["config"]["model"]["late_dropout"] == 0.3  # the recipe's, switched on for kept's second epoch
    assert kept["sampled_draws"] == 2 and other["sampled_draws"] == 0
    assert "2 sampled segmentations (alpha 0.5) in turn" in training.stdout
    assert "weights" in kept and "weights" not in other and not (trained / "other").exists()
    assert sorted(path.name for path in trained.iterdir()) == ["jobs", "results.json"]  # no job's own directory
    result = run_bench("multi30k_jax", "finish", str(prepared), str(trained), "--job", "jobs",
                       "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-3000:]
    row = json.loads(result.stdout.strip().splitlines()[-1])
    assert row["parameters"] == kept["parameters"] and row["epochs"] == 2 and row["hardware"].endswith("(JAX)")
    # The weights came across whole: TensorFlow here measures the val perplexity JAX measured there.
    assert row["val_ppl"] == pytest.approx(kept["averaged_val"]["ppl"], rel=1e-3)
    assert (tmp_path / "run" / "export" / "saved_model.pb").is_file()
    assert 0 <= row["tokenized_bleu"] <= 100 and "| en->de |" in result.stdout
    # `--decode` translated val and test there with every job's averaged weights, kept or not; `score` scores them
    # here, and the kept job's translations are the ones its SavedModel makes of the same sentences.
    assert kept["decoded"]["beam_size"] == 3 and other["decoded"]["beam_size"] == 1  # smoke decodes greedily
    result = run_bench("multi30k_jax", "score", str(prepared), str(trained))
    assert result.returncode == 0, result.stderr[-3000:]
    scored = json.loads(result.stdout.strip().splitlines()[-1])
    assert [r["job"] for r in scored["rows"]] == ["jobs", "other"] and "| other | 1 |" in result.stdout
    device = (trained / "jobs.val.hyp.de").read_text(encoding="utf-8").splitlines()
    saved_model = (tmp_path / "run" / "val.hyp.de").read_text(encoding="utf-8").splitlines()[: len(device)]
    assert len(device) == len(kept["decoded"]["hypotheses"]["val"]) == 48  # all of val (multi30k_head's)
    assert device == saved_model
    # The same search's token ids here, under TensorFlow, from the weights `finish` saved: text alone would not show
    # pieces that detokenize to nothing, which a model trained this briefly may emit.
    from kmt.checkpoints import load_run_model
    from kmt.inference.decoding import search_ids

    cfg, _, model = load_run_model(tmp_path / "run", tmp_path / "run" / "checkpoints" / "average_last2.weights.h5")
    with np.load(prepared / "ids.npz") as arrays:
        lengths = arrays["val_all_source_lengths"]
        rows = np.split(arrays["val_all_source"], np.cumsum(lengths)[:-1])
    source = np.zeros((len(rows), max(lengths)), np.int32)
    for i, row in enumerate(rows):
        source[i, : len(row)] = row
    tokens, _ = search_ids(model, source, beam_size=3, length_penalty=1.0, max_length_a=cfg.decode.max_length_a,
                              max_length_b=cfg.decode.max_length_b, max_length=cfg.model.max_length)
    stops = [np.flatnonzero((row == 3) | (row == 0)) for row in np.asarray(tokens)]  # the end token, or pad
    here = [" ".join(map(str, row[: stop[0] if len(stop) else len(row)]))
            for row, stop in zip(np.asarray(tokens), stops)]
    assert kept["decoded"]["hypotheses"]["val"] == here and any(here)
    test = run_bench("multi30k_jax", "score", str(prepared), str(trained), "--split", "test", "--job", "jobs")
    assert test.returncode == 0, test.stderr[-3000:]
    assert [r["job"] for r in json.loads(test.stdout.strip().splitlines()[-1])["rows"]] == ["jobs"]
    older = tmp_path / "older"  # a `prepare` directory from before --decode: no full val and test sources
    shutil.copytree(prepared, older)
    with np.load(prepared / "ids.npz") as arrays:
        np.savez(older / "ids.npz", **{key: arrays[key] for key in arrays.files if "_all_" not in key})
    rejected = run_bench("multi30k_jax", "train", str(older), "--out", str(tmp_path / "o"), "--job", "a", "--decode",
                         env=jax_env)
    assert rejected.returncode == 1 and rejected.stderr.strip().splitlines()[-1] == (
        f"error: --decode needs every val and test source line, which {older} (made before --decode) lacks; run "
        "`prepare` again")
    missing = run_bench("multi30k_jax", "score", str(prepared), str(trained), "--job", "nope")
    assert missing.returncode == 1 and missing.stderr.strip().splitlines()[-1] == (
        f"error: --job nope: no job of that name translated (train with --decode); {trained / 'results.json'} "
        "has translations of jobs, other")


def test_the_jax_bench_turns_bad_input_into_one_line(tmp_path):
    # A rejected setting stops `prepare` before any corpus is read, so this needs no $KMT_DATA_DIR.
    result = run_bench("multi30k_jax", "prepare", "en_de", "trainer.epochs=0", "--out", str(tmp_path / "p"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: trainer.epochs must be positive. Received: 0"
    assert not (tmp_path / "p").exists()
    result = run_bench("multi30k_jax", "prepare", "en_de", "--draws", "0", "--out", str(tmp_path / "p"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: --draws must be at least 1. Received: 0"
    assert not (tmp_path / "p").exists()
    result = run_bench("multi30k_jax", "train", str(tmp_path), "--out", str(tmp_path / "o"), "--job", "a")
    assert result.returncode == 1 and "Traceback" not in result.stderr  # TensorFlow is the default backend
    assert result.stderr.strip().splitlines()[-1].startswith("error: train runs under Keras's JAX backend")
    result = run_bench("multi30k_jax", "train", str(tmp_path), "--out", str(tmp_path / "o"), "--job", "a",
                       env={"KERAS_BACKEND": "jax"})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {tmp_path} is not a `prepare` directory")
    result = run_bench("multi30k_jax", "finish", str(tmp_path), str(tmp_path), "--job", "a")
    assert result.returncode == 1 and "is not a `prepare` directory" in result.stderr.strip().splitlines()[-1]
