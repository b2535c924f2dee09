"""The benchmark scripts run: their --help explains, and the batching benchmark runs end to end on a slice of a real
corpus with a tiny model (its figures are not checked: speed lives in benchmarks, not tests). The Multi30k bench
fetches every file it trains on and scores against before training (from a file:// upstream here), stops before
training when one is missing, and stops its training with it when stopped, each time with a one-line error."""

import gzip
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import optional

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = [
    "alignment",
    "attention_scaling",
    "batching",
    "constraints",
    "corpus_scale",
    "decode_speed",
    "distill",
    "documents",
    "decode_sweep",
    "distribute_scaling",
    "layer_complexity",
    "multi30k",
    "multi30k_jax",
    "opus_mt",
    "prefix_speed",
    "serve_load",
    "startup",
    "terminology",
    "train_throughput",
    "web_page",
]


def bench_env():
    """The environment for a bench subprocess, with $KMT_DATA_DIR (if set) made absolute so that any cwd works."""
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}
    if env.get("KMT_DATA_DIR"):
        env["KMT_DATA_DIR"] = str(Path(env["KMT_DATA_DIR"]).resolve())
    return env


def run_bench(script, *args, timeout=600, cwd=BENCH.parent, env=None):
    """`python bench/<script>.py args...` in `bench_env()`, with `env`'s variables on top."""
    return subprocess.run(
        [sys.executable, str(BENCH / f"{script}.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=bench_env() | (env or {}),
        cwd=cwd,
    )


def test_every_script_is_listed():
    runnable = {path.stem for path in BENCH.glob("*.py") if 'if __name__ == "__main__"' in path.read_text()}
    assert runnable == set(SCRIPTS)


@pytest.mark.e2e
@pytest.mark.parametrize("script", SCRIPTS)
def test_help_explains_and_exits_zero(script):
    result = run_bench(script, "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage:") and "--help" in result.stdout


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
@pytest.mark.e2e
def test_batching_benchmark_reports_every_width():
    result = run_bench(
        "batching", "--widths", "0,1,3", "--steps", "2", "--repeats", "1", "debug=smoke", "data.download=false"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "batching" and report["training_pairs"] <= 300  # data.limit=300 (smoke)
    rows = report["rows"]
    assert [row["bucket_width"] for row in rows] == [0, 1, 3]
    for row in rows:
        assert 0 < row["source_fill"] <= 1 and 0 < row["target_fill"] <= 1
        assert row["tokens_per_second"] > 0 and 0 < row["steps_per_epoch"] <= row["batches"]
    assert "| bucket width |" in result.stdout


@pytest.mark.e2e
def test_train_throughput_counts_updates_of_several_batches():
    result = run_bench(
        "train_throughput",
        *("--frameworks", "kmt", "--vocab", "64", "--batch-size", "2", "--length", "4", "--accumulate", "4"),
        *("--steps", "2", "--warmup", "1", "--repeats", "1", "--peak-tflops", "1"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    kmt = report["results"]["kmt"]
    assert report["accumulate"] == 4 and kmt["updates_per_second"] == pytest.approx(1000 / kmt["step_ms"] / 4)
    assert "| updates/s (4 batches) |" in result.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("script", ["batching", "train_throughput"])
def test_a_step_count_below_one_is_a_one_line_usage_error(script):
    result = run_bench(script, "--steps", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("error: --steps must be positive. Received: 0")


@pytest.mark.e2e
def test_the_corpus_scale_bench_prepares_both_corpora_and_trains_from_each(tmp_path):
    result = run_bench("corpus_scale", "--pairs", "1200", "--small", "600", "--updates", "2", "--workdir", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert [row["pairs"] for row in report["prepare"]] == [600, 1200]
    assert report["prepare"][1]["vocabulary"] == "the small corpus's" and report["prepare"][1]["kept"] > 1000
    assert all(row["rss_mb"] > 100 for row in report["training"]) and report["rss_ratio"] > 0
    for row in report["training"]:  # resident memory, split into the process's own and file-backed pages
        assert row["anon_mb"] > 0 and row["file_mb"] > 0 and row["anon_mb"] + row["file_mb"] <= row["rss_mb"] + 1
    assert (tmp_path / "large" / "meta.json").is_file()


@pytest.mark.e2e
def test_the_opus_mt_bench_imports_exports_and_times_the_savedmodel_against_ctranslate2():
    optional("transformers", "pip install transformers (the bench builds its checkpoint with it)")
    result = run_bench("opus_mt", "--tiny", "--sentences", "2", "--repeats", "1", "--batch-sizes", "1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    imported, decoded = lines
    assert [row["what"] for row in imported["rows"]][1:] == [
        "kmt-import",
        "SavedModel export (kmt-export)",
        "CTranslate2 int8 export",
    ]
    assert all(row["seconds"] > 0 and row["mib"] > 0 for row in imported["rows"][1:])
    variants = {(row["variant"], row["batch"]) for row in decoded["rows"]}
    assert {("SavedModel greedy", 1), ("CT2 int8 greedy", 2)} <= variants
    assert all(row["same_translations"] for row in decoded["speedups"] if "float32" in row["variant"])


@pytest.mark.e2e
def test_the_opus_mt_bench_times_the_savedmodel_against_transformers_generate():
    optional("transformers", "pip install transformers (the bench builds its checkpoint with it)")
    result = run_bench(
        "opus_mt", "--tiny", "--transformers", "--max-tokens", "6", "--sentences", "2", "--repeats", "1",
        "--batch-sizes", "2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    decoded = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")][-1]
    assert decoded["search"]["max_length_b"] == 6 and decoded["search"]["length_penalty"] == 0
    assert {(row["variant"], row["batch"]) for row in decoded["rows"]} == {
        (f"{engine} {search}", 2) for engine in ("SavedModel", "transformers") for search in ("greedy", "beam4")
    }
    assert all(0 < row["mean_output_tokens"] <= 6 for row in decoded["rows"])
    (greedy,) = [row for row in decoded["speedups"] if row["variant"] == "SavedModel greedy"]
    assert greedy["over"] == "transformers greedy" and greedy["same_translations"]  # the import's greedy parity


@pytest.mark.e2e
def test_decode_speed_refuses_two_comparisons_at_once_in_one_line():
    result = run_bench("decode_speed", "RUN", "--against", "OTHER", "--ctranslate2")
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith("--against, --ctranslate2 and --transformers are different comparisons: choose one")
    )
    result = run_bench("decode_speed", "RUN", "--max-tokens", "40")
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.endswith("--max-tokens goes with --transformers and must be at least 1")


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


@pytest.mark.skipif(
    not os.environ.get("KMT_DATA_DIR") or not Path("/proc/self/cwd").exists(),
    reason="needs the real corpora in $KMT_DATA_DIR, and Linux's /proc",
)
@pytest.mark.e2e
def test_stopping_the_multi30k_bench_stops_its_training_and_says_how_to_resume(tmp_path):
    # Before: SIGTERM ended the bench and left kmt-train training, orphaned, on the cores; Ctrl-C killed kmt-train
    # before it could save. Now the bench passes the signal on (SIGINT, SIGTERM and SIGHUP alike), kmt-train saves and
    # stops (its own handling of each: tests/test_reliability.py), the bench waits for it and prints the --resume
    # command.
    signum = signal.SIGTERM
    bench = subprocess.Popen(
        [sys.executable, str(BENCH / "multi30k.py"), "en_de", *ENDLESS],
        cwd=tmp_path,
        env=bench_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # as in a terminal
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
    assert last == (
        f"error: stopped by {signum.name}; continue the run from its last completed epoch with: "
        f"python bench/multi30k.py en_de --resume runs/bench/multi30k_en_de/{run_dir.name}"
    )
    # kmt-train's own handling of the signal ran: the weights of the moment are saved
    assert (run_dir / "checkpoints" / "interrupted.weights.h5").exists()


def multi30k_upstream(root, tok=True):
    """A file:// copy of the Multi30k repository (github multi30k/dataset) holding the first lines of the real En-De
    files, laid out as it is: `data/task1/raw/<stem>.<lang>.gz` and, with `tok`, `data/task1/tok/<file>` (not
    gzipped upstream); returns its URL."""
    corpus = Path(os.environ["KMT_DATA_DIR"]) / "multi30k"
    for stem, lines in [("train", 64), ("val", 16), ("test_2016_flickr", 16)]:
        for lang in ("en", "de"):
            for name, upstream in [
                (f"{stem}.{lang}", f"raw/{stem}.{lang}.gz"),
                (f"tok/{stem}.lc.norm.tok.{lang}", f"tok/{stem}.lc.norm.tok.{lang}"),
            ]:
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


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
@pytest.mark.e2e
def test_the_multi30k_bench_runs_on_a_fresh_machine_from_the_upstream_alone(tmp_path):
    url = multi30k_upstream(tmp_path / "upstream")
    data = tmp_path / "data"
    result = run_bench(
        "multi30k", "en_de", "debug=smoke", cwd=tmp_path, env={"KMT_DATA_DIR": str(data), "KMT_MULTI30K_URL": url}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    row = json.loads(result.stdout.strip().splitlines()[-1])
    assert row["epochs"] == 1 and 0 <= row["tokenized_bleu"] <= 100 and 0 <= row["sacrebleu"] <= 100
    # It fetched what it trains on and the tokenized reference it scores against, before training, and only those.
    folder = data / "multi30k"
    assert files_under(folder) == sorted([*RAW, "tok/test_2016_flickr.lc.norm.tok.de"])
    assert all((folder / name).read_bytes() == upstream_text(url, name) for name in files_under(folder))
    fetched = [line for line in result.stdout.splitlines() if line.startswith("fetched ")]
    assert fetched == [
        f"fetched {folder / name}"
        for name in [
            "train.en",
            "train.de",
            "val.en",
            "val.de",
            "test_2016_flickr.en",
            "test_2016_flickr.de",
            "tok/test_2016_flickr.lc.norm.tok.de",
        ]
    ]
    # Resumed once it has trained all its epochs (as after a kill while it scored or exported): it trains nothing and
    # prints the run's row again. Before, the row's tokens/s was the resuming invocation's, none, and a traceback.
    (run_dir,) = (tmp_path / "runs" / "bench" / "multi30k_en_de").iterdir()
    metrics = json.loads((run_dir / "metrics.json").read_text())["train"]
    resumed = run_bench(
        "multi30k",
        "en_de",
        "--resume",
        f"runs/bench/multi30k_en_de/{run_dir.name}",
        cwd=tmp_path,
        env={"KMT_DATA_DIR": str(data), "KMT_MULTI30K_URL": url},
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "\n| direction | tok. BLEU | sacreBLEU | chrF |" in resumed.stdout
    again = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert json.loads((run_dir / "bench.json").read_text()) == again and again["epochs"] == 1
    assert again["train_minutes"] == round(metrics["run_seconds"] / 60, 1)
    assert again["tokens_per_second"] == pytest.approx(metrics["tokens_per_second"], abs=1)  # the same epoch's


@pytest.mark.e2e
@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
@pytest.mark.parametrize(
    "flags, missing",
    [([], "test_2016_flickr.lc.norm.tok.de"), (["--tok-data"], "train.lc.norm.tok.en")],
    ids=["raw", "tok-data"],
)
def test_a_reference_the_upstream_lacks_stops_the_multi30k_bench_before_training(tmp_path, flags, missing):
    url = multi30k_upstream(tmp_path / "upstream", tok=False)
    data = tmp_path / "data"
    result = run_bench(
        "multi30k", "en_de", *flags, cwd=tmp_path, env={"KMT_DATA_DIR": str(data), "KMT_MULTI30K_URL": url}
    )
    assert result.returncode != 0
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: could not download {url}/data/task1/tok/{missing} (URLError: "), line
    assert line.endswith(f"; place {missing} in {data}/multi30k/tok by hand"), line
    assert not (tmp_path / "runs").exists()  # kmt-train never started
    assert files_under(data) == ([] if flags else [f"multi30k/{name}" for name in RAW])  # no partial file either


@pytest.mark.e2e
def test_a_failed_training_ends_the_multi30k_bench_with_its_one_line_error(tmp_path):
    # The config is rejected before any corpus is read, so this needs no $KMT_DATA_DIR.
    result = run_bench("multi30k", "en_de", "debug=smoke", "trainer.epochs=0", timeout=300, cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == "error: trainer.epochs must be positive. Received: 0"


# The JAX side of the comparison below: the run's averaged weights translating val as kmt-train's finish did (kmt's
# keras.ops search under JAX), in a process where TensorFlow cannot be imported.
JAX_TRANSLATE = """
import json, sys
from kmt.inference.loading import load_translator
translator = load_translator(sys.argv[1], checkpoint=sys.argv[2])
lines = open(sys.argv[3], encoding="utf-8").read().splitlines()
print(json.dumps(translator.translate(lines)))
"""


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
@pytest.mark.e2e
def test_the_jax_bench_trains_under_jax_and_exports_and_scores_here(tmp_path, multi30k_head):
    prepared, run = tmp_path / "prepared", tmp_path / "run"
    # The GPU machines have JAX but no TensorFlow: here `import tensorflow` fails in `train` as it would there.
    no_tensorflow = tmp_path / "no_tensorflow" / "tensorflow"
    no_tensorflow.mkdir(parents=True)
    (no_tensorflow / "__init__.py").write_text("raise ImportError(\"No module named 'tensorflow'\")\n")
    python_path = os.pathsep.join(filter(None, [str(no_tensorflow.parent), os.environ.get("PYTHONPATH")]))
    # XLA's full optimization, as on a GPU box: the JAX search is compared with the SavedModel's on long, barely
    # trained outputs, where level 0's different rounding can turn a near-tie the other way.
    jax_env = {"KERAS_BACKEND": "jax", "PYTHONPATH": python_path, "JAX_DISABLE_MOST_OPTIMIZATIONS": "0"}
    # Tiny and quick: four length buckets (four shapes for XLA to compile; the fixed edges make a dozen, twice the
    # first epoch's time), float32 on the CPU, a beam of 3, and 12 epochs (the first compiles; a few epochs in, the
    # model translates every val sentence to nothing), without the recipe's subword sampling (the batcher's sampled
    # passes in fixed shapes: tests/test_batches.py).
    result = run_bench(
        "multi30k_jax",
        "prepare",
        "en_de",
        "--out",
        str(prepared),
        "debug=smoke",
        "data.download=false",
        "trainer.precision=float32",
        "data.bucket_width=32",
        "data.subword_sampling=0",
        "decode.beam_size=3",
        "decode.length_penalty=1.0",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (prepared / "meta.json").is_file() and (prepared / "train.source.ids").is_file()
    training = run_bench(
        "multi30k_jax",
        "train",
        str(prepared),
        "--out",
        str(run),
        "trainer.epochs=12",
        "trainer.average_last=2",
        env=jax_env,
    )
    assert training.returncode == 0, training.stderr[-3000:]
    figures = json.loads(training.stdout.strip().splitlines()[-1])
    metrics = json.loads((run / "metrics.json").read_text())
    assert figures["hardware"] == "1 x cpu (JAX)" and figures["precision"] == "float32"
    assert figures["parameters"] == metrics["train"]["parameters"] and figures["epochs"] == 12
    assert figures["tokens_per_second"] == round(metrics["train"]["tokens_per_second"]) > 0
    assert figures["mfu"] is None and "MFU: no dense bf16 peak known for 'cpu'" in training.stdout
    # An ordinary run directory, trained on the prepared data (no data/ of its own), and no SavedModel without
    # TensorFlow: the run names the kmt-export command that `finish` runs.
    assert (run / "checkpoints" / "epoch_012.weights.h5").is_file() and not (run / "data").exists()
    assert (run / "checkpoints" / "average_last2.weights.h5").is_file() and (run / "logs" / "history.csv").is_file()
    assert "data.path=" + str(prepared) in (run / ".hydra" / "overrides.yaml").read_text()
    assert metrics["val"]["pairs"] == metrics["test"]["pairs"] == 48 and not (run / "export").exists()
    assert f"kmt-export {run} --average 2" in training.stderr + training.stdout
    result = run_bench("multi30k_jax", "finish", str(run))
    assert result.returncode == 0, result.stderr[-3000:]
    row = json.loads(result.stdout.strip().splitlines()[-1])
    assert (run / "export" / "saved_model.pb").is_file() and json.loads((run / "bench.json").read_text()) == row
    assert row["direction"] == "en->de" and row["hardware"] == "1 x cpu (JAX)" and "| en->de |" in result.stdout
    assert row["epochs"] == 12 and 0 <= row["tokenized_bleu"] <= 100 and row["bleu_signature"].startswith("nrefs:1")
    # The SavedModel translates val as the run did under JAX: the same lines, but where the two differ on a near-tie
    # of a barely trained model, the SavedModel's `score` signature must rate the two translations alike.
    sources = multi30k_head / "multi30k" / "val.en"
    translated = subprocess.run(
        [
            sys.executable,
            "-c",
            JAX_TRANSLATE,
            str(run),
            str(run / "checkpoints" / "average_last2.weights.h5"),
            str(sources),
        ],
        capture_output=True,
        text=True,
        env=bench_env() | jax_env,
        timeout=600,
        cwd=BENCH.parent,
    )
    assert translated.returncode == 0, translated.stderr[-3000:]
    device = json.loads(translated.stdout.strip().splitlines()[-1])
    saved_model = (run / "val.hyp.de").read_text(encoding="utf-8").splitlines()
    assert len(device) == len(saved_model) == 48 and any(device)
    from kmt.metrics import translation_scores

    references = (multi30k_head / "multi30k" / "val.de").read_text(encoding="utf-8").splitlines()
    assert translation_scores(device, references)["chrf"] == pytest.approx(metrics["val"]["chrf"])  # the run's own
    differ = [i for i, (a, b) in enumerate(zip(device, saved_model)) if a != b]
    if differ:  # the `score` signature in full precision (kmt-score prints 4 decimals)
        from kmt.inference.loading import load_translator

        lines = sources.read_text(encoding="utf-8").splitlines()
        pairs = [(lines[i], hypotheses[i]) for hypotheses in (device, saved_model) for i in differ]
        scores = [score.log_probability for score in load_translator(run / "export").score(*zip(*pairs))]
        assert all(abs(a - b) <= 1e-5 for a, b in zip(scores[: len(differ)], scores[len(differ) :])), (
            [(device[i], saved_model[i]) for i in differ],
            scores,
        )


@pytest.mark.e2e
def test_the_jax_bench_turns_bad_input_into_one_line(tmp_path):
    # kmt-prepare rejects the setting before any corpus is read, so this needs no $KMT_DATA_DIR.
    result = run_bench("multi30k_jax", "prepare", "en_de", "--out", str(tmp_path / "p"), "trainer.epochs=0")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: trainer.epochs must be positive. Received: 0"
    assert not (tmp_path / "p").exists()
    result = run_bench("multi30k_jax", "train", str(tmp_path), "--out", str(tmp_path / "o"), "--epochs", "3")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("unrecognized arguments: --epochs 3")
    result = run_bench("multi30k_jax", "train", str(tmp_path), "--out", str(tmp_path / "o"))
    assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path} is not a `prepare` directory (no meta.json and .hydra/overrides.yaml)"
    )
    result = run_bench("multi30k_jax", "finish", str(tmp_path))
    assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path} holds no metrics.json and bench.json: pass the run directory `train --out` finished"
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.e2e
def test_the_steering_benches_score_alignments_by_layer_and_time_prefixed_and_constrained_decoding(smoke_run, tmp_path):
    sources, targets = ["1 May 1950", "3 June 1951", "7/4/21"], ["1950-05-01", "1951 06 03", "2021-07-04"]
    (tmp_path / "src").write_text("".join(f"{line}\n" for line in sources))
    (tmp_path / "tgt").write_text("".join(f"{line}\n" for line in targets))
    (tmp_path / "gold").write_text("2-0\n2-0 1?1 0-2\n0?0\n")  # sure and possible links
    (tmp_path / "other").write_text("2-0\n2-0 1-1 0-2\n\n")  # another aligner: every sure link, no wrong one
    common = ("--source", tmp_path / "src", "--target", tmp_path / "tgt")
    result = run_bench(
        "alignment", smoke_run, *common, "--reference", tmp_path / "gold", "--aligner", f"other={tmp_path / 'other'}"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads(result.stdout.splitlines()[-1])["rows"]
    assert rows[0] == {"aligner": "other", "layer": "", "heads": "", "aer": 0.0, "precision": 1.0, "recall": 1.0}
    assert [row["layer"] for row in rows[1:]] == list(range(len(rows) - 1))  # each of the run's decoder layers
    assert all(0 <= row["aer"] <= 1 for row in rows)

    result = run_bench("prefix_speed", smoke_run, *common, "--batch-size", "2", "--repeats", "1", "--words", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "last call: 2 of 2 translations begin with their prefix" in result.stdout
    assert len(json.loads(result.stdout.splitlines()[-1])["rows"]) == 3

    result = run_bench(
        "constraints",
        smoke_run,
        *common,
        "--batch-size",
        "2",
        "--beam-size",
        "2",
        "--seed",
        "3",
        "--length-penalty",
        "1",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout.splitlines()[-1])
    assert "beam 2, length penalty 1.0," in result.stdout
    assert figures["sentences"] == 3 and 3 <= figures["phrases"] <= 9 and figures["satisfied"] == figures["fitted"]
    assert [row["signature"] for row in figures["rows"]] == ["translate", "translate_constrained"]


@pytest.mark.e2e
def test_the_startup_bench_times_each_command_for_a_savedmodel_and_a_ctranslate2_directory(smoke_run, tmp_path):
    from kmt.cli import export

    export.main([str(smoke_run), "--format", "ctranslate2", "--output", str(tmp_path / "ct2")])
    result = run_bench("startup", smoke_run, "--ctranslate2", tmp_path / "ct2", "--repeats", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout.splitlines()[-1])["rows"]
    commands = ["kmt-translate", "kmt-serve listening", "kmt-serve ready", "kmt-serve every signature warmed"]
    floors = [("import tensorflow", ""), ("import tensorflow in a command", ""), ("import kmt", "")]
    assert [(row["command"], row["format"]) for row in rows] == floors + [
        (command, fmt) for command in commands for fmt in ("SavedModel", "CTranslate2")
    ]
    assert all(0 < row["min_s"] == row["median_s"] == row["max_s"] for row in rows)  # one round
    seconds = {(row["command"], row["format"]): row["median_s"] for row in rows}
    for fmt in ("SavedModel", "CTranslate2"):
        warmed = seconds[("kmt-serve every signature warmed", fmt)]
        assert seconds[("kmt-serve listening", fmt)] <= seconds[("kmt-serve ready", fmt)] <= warmed
    assert "| kmt-translate | CTranslate2 |" in result.stdout

    result = run_bench("startup", "--export", tmp_path / "ct2")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        result.stderr.strip().splitlines()[-1].endswith(f"{tmp_path / 'ct2'} is not a SavedModel (no saved_model.pb)")
    )
