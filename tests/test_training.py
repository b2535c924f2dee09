"""Training: the real configs composed with debug=smoke, trained into tmp_path (e2e), and one short real run that must
learn; the shared smoke run's files, the train step, and every refusal before any data is read (the default tier)."""

import csv
import json
import math
import os
import re
import shutil

import h5py
import pytest
from omegaconf import OmegaConf

from kmt.build import build_model, build_schedule, compile_model
from kmt.checkpoints import fine_tuned_model, init_source, load_run_model
from kmt.config import validate
from kmt.data.prepared import prepare_data
from kmt.errors import ConfigError, DataError, KmtError
from kmt.training import train
from tests.helpers import compose_config, pixels_of_color, run_cli, train_main


def _history(run_dir):
    with open(run_dir / "logs" / "history.csv") as f:
        return list(csv.DictReader(f))


def test_smoke_run_makes_every_file(smoke_run):
    # smoke_run is `kmt-train debug=smoke trainer.epochs=2`, as a user would first run it.
    for path in [
        ".hydra/config.yaml",
        "config.yaml",
        "tokenizer/joint.model",
        "checkpoints/epoch_001.weights.h5",
        "checkpoints/epoch_002.weights.h5",
        "checkpoints/best.weights.h5",
        "logs/history.csv",
        "logs/curves.png",
        "model.keras",
        "metrics.json",
        "train.log",
        "export/saved_model.pb",
    ]:
        assert (smoke_run / path).exists(), path
    assert list((smoke_run / "logs").glob("train/events.out.tfevents.*"))
    metrics = json.loads((smoke_run / "metrics.json").read_text())
    assert set(metrics) >= {"train", "val", "test"}
    assert metrics["train"]["tokens_per_second"] > 0 and metrics["train"]["epochs"] == 2
    assert [row["epoch"] for row in _history(smoke_run)] == ["0", "1"]


@pytest.mark.e2e
def test_the_smoke_run_asked_for_more_epochs_goes_on_from_its_last(smoke_run, tmp_path, caplog):
    caplog.set_level("INFO", logger="kmt")
    run_dir = shutil.copytree(smoke_run, tmp_path / "run", ignore=shutil.ignore_patterns("export"))  # it is shared
    kept = (run_dir / "checkpoints" / "epoch_002.weights.h5").read_bytes()
    train(compose_config("trainer.epochs=3", "trainer.export=false"), run_dir)
    assert "resuming after epoch 2 at optimizer step" in caplog.text
    history = _history(run_dir)
    assert [row["epoch"] for row in history] == ["0", "1", "2"]
    assert float(history[2]["learning_rate"]) != float(history[1]["learning_rate"])  # the schedule went on
    assert (run_dir / "checkpoints" / "epoch_002.weights.h5").read_bytes() == kept  # not overwritten, kept
    assert (run_dir / "checkpoints" / "epoch_003.weights.h5").exists()
    vocabulary = (smoke_run / "tokenizer" / "joint.model").read_bytes()
    assert (run_dir / "tokenizer" / "joint.model").read_bytes() == vocabulary
    assert json.loads((run_dir / "metrics.json").read_text())["train"]["epochs"] == 3


@pytest.mark.e2e
def test_kmt_train_learns_the_dates_task(tmp_path):
    """The real command, not under debug=smoke: the default tiny model and Noam warm-up on 4,000 dates pairs, 4 short
    epochs (492 updates), must translate a good share of the test dates exactly. A decoder that ignores the source,
    or a pipeline that mislabels the targets, can get the ISO format's tokens right (a run stuck there was measured
    at token accuracy 0.66) but next to no date exactly. Measured: test exact match 0.68 and 0.695, token accuracy
    0.930 and 0.923 (seeds 1234 and 7); with optim.lr_scale=1e-6, which stops learning, far below both."""
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "data.num_train=4000",
        "data.num_val=200",
        "data.num_test=200",
        "data.max_tokens=512",
        "trainer.epochs=4",
        "decode.beam_size=1",
        "trainer.export=false",
        f"hydra.run.dir={run_dir}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    test = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert test["pairs"] == 200
    assert test["exact_match"] >= 0.4 and test["accuracy"] >= 0.85, test


@pytest.mark.e2e
def test_fine_tuning_starts_from_another_runs_vocabulary_and_weights(smoke_run, tmp_path, caplog):
    """trainer.init_from: the vocabulary is copied and the weights loaded, so at a vanishing learning rate the run
    ends with the weights the other run ended with (a fresh start would end far from them)."""
    caplog.set_level("INFO")
    base = shutil.copytree(smoke_run, tmp_path / "base")  # a copy, to delete below
    overrides = [
        f"trainer.init_from={base}",
        "optim.lr_scale=1e-9",
        "model.dropout=0.3",
        "model.source_word_dropout=0.2",
        "data.tokenizer.vocab_size=400",
        "data.seed=7",
        "trainer.export=false",
    ]
    train(compose_config(*overrides), tmp_path / "tuned")
    vocabulary = (base / "tokenizer" / "joint.model").read_bytes()
    assert (tmp_path / "tuned" / "tokenizer" / "joint.model").read_bytes() == vocabulary
    assert f"fine-tuning from {base / 'checkpoints' / 'epoch_002.weights.h5'}" in caplog.text
    start, tuned = (load_run_model(run)[2].get_weights() for run in (base, tmp_path / "tuned"))
    assert max(abs(a - b).max() for a, b in zip(start, tuned)) < 1e-5
    # Its optimizer starts afresh (the other run's checkpoint holds that run's): it counts its own updates only.
    steps = int(re.search(r"training pairs, (\d+) steps an epoch", caplog.text)[1])
    with h5py.File(sorted((tmp_path / "tuned" / "checkpoints").glob("epoch_*.weights.h5"))[-1]) as newest:
        assert int(newest["optimizer/vars/0"][()]) == steps * len(_history(tmp_path / "tuned"))

    # Resuming the fine-tuning run needs only its own resume state, not the run it started from.
    shutil.rmtree(base)
    train(compose_config(*overrides, "trainer.epochs=2"), tmp_path / "tuned")
    assert [row["epoch"] for row in _history(tmp_path / "tuned")] == ["0", "1"]
    assert (tmp_path / "tuned" / "tokenizer" / "joint.model").read_bytes() == vocabulary

    # A weights file names its run; no run at all is refused with the reason.
    weights = smoke_run / "checkpoints" / "epoch_001.weights.h5"
    assert init_source(str(weights))[:2] == (smoke_run, weights)
    with pytest.raises(KmtError, match="is not a kmt run directory"):
        init_source(str(tmp_path))

    # The model keeps the starting run's shape whatever this config says; only the dropouts are this config's.
    wider = compose_config("model.hidden_dim=64", "model.num_layers=2", "model.dropout=0.3").model
    shape = fine_tuned_model(wider, init_source(str(smoke_run))[2])
    assert (shape["hidden_dim"], shape["num_layers"], "dropout" in shape) == (32, 1, False)
    assert "model.num_layers=1, model.hidden_dim=32" in caplog.text


@pytest.mark.e2e
def test_train_returns_the_metrics_leaves_the_config_and_logs_perplexity_as_exp_of_the_loss(tmp_path):
    cfg = compose_config(
        "optim.label_smoothing=0", "trainer.objective=ppl", "trainer.monitor=val_ppl", "trainer.export=false"
    )
    before = OmegaConf.to_yaml(cfg)
    metrics = train(cfg, tmp_path)
    assert metrics == json.loads((tmp_path / "metrics.json").read_text())
    assert OmegaConf.to_yaml(cfg) == before
    saved = OmegaConf.load(tmp_path / "config.yaml")  # the run's record: what it resolved (trainer.precision=auto)
    assert cfg.trainer.precision == "auto" and saved.trainer.precision == "float32"

    # Without label smoothing, perplexity is exp of the loss.
    val = metrics["val"]
    assert val["ppl"] == pytest.approx(math.exp(val["loss"]), rel=1e-4)
    row = _history(tmp_path)[-1]
    assert float(row["val_ppl"]) == pytest.approx(math.exp(float(row["val_loss"])), rel=1e-4)
    assert float(row["ppl"]) > 1.0
    assert json.loads((tmp_path / "checkpoints" / "best.json").read_text())["monitor"] == "val_ppl"


@pytest.mark.e2e
def test_val_bleu_is_logged_every_epoch_and_picks_the_best_checkpoint(tmp_path):
    cfg = compose_config(
        "trainer.epochs=2",
        "trainer.val_bleu=true",
        "trainer.monitor=val_bleu",
        "trainer.precision=mixed_bfloat16",
        "trainer.export=false",
    )
    train(cfg, tmp_path)
    history = _history(tmp_path)
    scores = [float(row["val_bleu"]) for row in history]
    assert len(scores) == 2 and all(score >= 0 for score in scores)
    best = json.loads((tmp_path / "checkpoints" / "best.json").read_text())
    assert best["monitor"] == "val_bleu" and best["value"] == max(scores)
    assert best["epoch"] == 1 + scores.index(max(scores))
    train_metrics = json.loads((tmp_path / "metrics.json").read_text())["train"]
    assert train_metrics["best"] == best
    # The last epoch's val_bleu is greedy BLEU of the final (float32 copy of the) weights, which the end-of-run
    # scoring also decodes greedily under debug=smoke: the two must agree.
    val_metrics = json.loads((tmp_path / "metrics.json").read_text())["val"]
    assert scores[-1] == pytest.approx(val_metrics["bleu"])


@pytest.mark.e2e
def test_cooldown_ends_with_the_run_and_a_cut_short_one_says_so(tmp_path, caplog):
    caplog.set_level("INFO", logger="kmt.training")
    train(compose_config("trainer.epochs=2", "optim.cooldown=0.5", "trainer.export=false"), tmp_path / "full")
    rates = [float(row["learning_rate"]) for row in _history(tmp_path / "full")]
    plain = tmp_path / "plain"
    train(compose_config("trainer.epochs=2", "trainer.export=false"), plain)
    noam = [float(row["learning_rate"]) for row in _history(plain)]
    steps = json.loads((plain / "metrics.json").read_text())["train"]["steps"]
    assert rates[0] == pytest.approx(noam[0])  # the first half: the paper's schedule
    assert rates[1] == pytest.approx(noam[1] / round(steps / 2), rel=1e-3)  # the last update's: 1 / cooldown_steps
    assert "cooled down linearly over the last" in caplog.text
    assert "did not cool down" not in caplog.text

    caplog.clear()  # a wall-clock budget that stops the run after one of three epochs
    train(
        compose_config("trainer.epochs=3", "trainer.max_minutes=0.0001", "optim.cooldown=0.5", "trainer.export=false"),
        tmp_path / "cut",
    )
    assert len(_history(tmp_path / "cut")) == 1
    assert "did not cool down; lower trainer.epochs" in caplog.text


@pytest.mark.e2e
def test_subword_sampling_trains_on_longer_drawn_segmentations_and_reproduces(tmp_path, caplog):
    caplog.set_level("INFO", logger="kmt.training")
    sampled = ["data.subword_sampling=0.1", "trainer.epochs=2", "trainer.export=false"]
    train(compose_config(*sampled), tmp_path / "a")
    longer = re.search(r"subword sampling \(alpha 0.1\): a pass draws ([\d.]+)% more target tokens", caplog.text)
    assert longer and float(longer.group(1)) > 0
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert metrics["train"]["steps"] > 0 and metrics["val"]["loss"] > 0
    train(compose_config(*sampled), tmp_path / "b")  # the draws are seeded: the same seed trains the same
    losses = [[float(row[key]) for row in _history(tmp_path / run) for key in ("loss", "val_loss")] for run in "ab"]
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)


@pytest.mark.e2e
def test_late_dropout_changes_the_rate_from_its_epoch_and_again_after_a_resume(tmp_path, caplog):
    """model.late_dropout: the first epochs train as without it; then the new rate acts (here 0.9, so the training
    loss rises above the run that keeps 0.5); a resumed run past the switch gets the new rate back."""
    caplog.set_level("INFO", logger="kmt.training")
    common = ["model.dropout=0.5", "trainer.epochs=2", "trainer.export=false"]
    train(compose_config(*common), tmp_path / "plain")
    late = ["model.late_dropout=0.9", "model.late_dropout_after=1"]
    train(compose_config(*common, *late), tmp_path / "late")
    plain, switched = (_history(tmp_path / run) for run in ("plain", "late"))
    assert float(switched[0]["loss"]) == pytest.approx(float(plain[0]["loss"]), rel=1e-4)
    assert float(switched[1]["loss"]) > float(plain[1]["loss"]) + 0.3
    assert "late dropout: residual and embedding dropout 0.5 -> 0.9 from epoch 2 (7 layers)" in caplog.text

    caplog.clear()
    train(compose_config(*common, *late, "trainer.epochs=3"), tmp_path / "late")
    assert "late dropout: residual and embedding dropout 0.5 -> 0.9 from epoch 3 (7 layers)" in caplog.text
    assert [row["epoch"] for row in _history(tmp_path / "late")] == ["0", "1", "2"]


def test_accumulated_batches_make_one_update_with_their_mean_gradient():
    import numpy as np

    no_dropout = ["model.dropout=0", "model.attention_dropout=0", "model.activation_dropout=0"]
    rng = np.random.default_rng(0)
    source, target = rng.integers(1, 40, (4, 6), dtype="int32"), rng.integers(1, 40, (4, 7), dtype="int32")
    halves = [
        ({"source": source[i : i + 2], "target_in": target[i : i + 2, :-1]}, target[i : i + 2, 1:]) for i in (0, 2)
    ]  # two batches of 2 sentences, no padding: 12 target tokens each

    def trained(accumulation, batches):
        cfg = compose_config(*no_dropout, f"optim.gradient_accumulation_steps={accumulation}")
        schedule = build_schedule(cfg.optim, cfg.model.hidden_dim, total_steps=10)
        model = compile_model(build_model(cfg.model, 40, 40), cfg.optim, schedule, cfg.trainer.jit_compile)
        model.set_weights(initial)
        for inputs, outputs in batches:
            model.train_on_batch(inputs, outputs)
            yield model, int(model.optimizer.iterations)

    cfg = compose_config(*no_dropout)
    initial = build_model(cfg.model, 40, 40).get_weights()
    (_, after_first), (accumulated, updates) = trained(2, halves)
    assert after_first == 0 and updates == 1
    [(whole, _)] = trained(1, [({"source": source, "target_in": target[:, :-1]}, target[:, 1:])])

    # The loss is a mean over target tokens, so one batch of all 4 sentences has the mean gradient of the halves.
    # Adam's first moment after one update is (1 - beta_1) * gradient, linear in it, so compare that: the weights
    # themselves move by about lr * g / |g|, which turns rounding noise in near-zero gradients into +-lr.
    def moments(model):
        return [v.numpy() for v in model.optimizer.variables if v.path.endswith("_momentum")]

    accumulated_moments, whole_moments = moments(accumulated), moments(whole)
    assert len(whole_moments) == len(whole.trainable_variables)
    scale = max(np.abs(m).max() for m in whole_moments)
    assert scale > 0
    for a, b in zip(accumulated_moments, whole_moments):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * scale)
    # ... and the update was taken at the same learning rate: update 0's, not batch 1's.
    moved = [np.abs(a - b).max() for a, b in zip(accumulated.get_weights(), initial)]
    assert max(moved) == pytest.approx(max(np.abs(a - b).max() for a, b in zip(whole.get_weights(), initial)))
    assert float(accumulated.optimizer.learning_rate) == pytest.approx(float(whole.optimizer.learning_rate))


def test_the_train_step_is_traced_once_across_batch_shapes():
    import tensorflow as tf

    cfg = compose_config()
    schedule = build_schedule(cfg.optim, cfg.model.hidden_dim, 4)
    model = compile_model(build_model(cfg.model, 40, 40), cfg.optim, schedule, cfg.trainer.jit_compile)
    traces = []
    step = model.train_step

    def traced_step(data):  # runs only while TensorFlow traces the step
        traces.append(data)
        return step(data)

    model.train_step = traced_step
    batches = [
        ({"source": tf.fill((b, s), 5), "target_in": tf.fill((b, t), 6)}, tf.fill((b, t), 7))
        for b, s, t in [(4, 3, 5), (2, 7, 6), (3, 4, 2), (1, 9, 9)]
    ]
    signature = (
        {"source": tf.TensorSpec([None, None], tf.int32), "target_in": tf.TensorSpec([None, None], tf.int32)},
        tf.TensorSpec([None, None], tf.int32),
    )
    data = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=signature)
    data = data.apply(tf.data.experimental.assert_cardinality(len(batches)))
    model.fit(data, epochs=2, verbose=0, shuffle=False)
    assert int(model.optimizer.iterations) == 8
    assert len(traces) == 1  # an optimizer built inside the first trace makes tf.function trace it twice


@pytest.mark.e2e
def test_multirun_writes_one_dir_per_job_and_a_summary(tmp_path):
    result = run_cli(
        "train",
        "-m",
        "model.num_layers=1,2",
        "optim.warmup_steps=100",
        "debug=smoke",
        "trainer.export=false",
        f"hydra.sweep.dir={tmp_path}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert jobs == ["0", "1"]
    assert all((tmp_path / job / "metrics.json").exists() for job in jobs)
    with open(tmp_path / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [row["overrides"].lower() for row in rows] == [  # Hydra writes booleans as False/True
        f"model.num_layers={n} optim.warmup_steps=100 debug=smoke trainer.export=false" for n in (1, 2)
    ]
    assert all(float(row["val.loss"]) > 0 for row in rows)
    assert "| job |" in (tmp_path / "summary.md").read_text()
    colors = ("#1f77b4", "#ff7f0e")  # matplotlib's C0 and C1: one per job
    assert all(pixels_of_color(tmp_path / "summary.png", color) > 30 for color in colors)


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.hidden_dim=31", "model.hidden_dim must be divisible by model.num_heads"),
        ("model.dropout=-0.1", "model.dropout must be in [0, 1)"),
        ("model.activation=tanh", "model.activation must be one of relu, gelu, swish, silu. Received: 'tanh'"),
        ("model.position_layout=t2t", "model.position_layout must be one of interleaved, halves. Received: 't2t'"),
        ("model.output_bias=true model.tied_output=false", "model.output_bias needs model.tied_output=true"),
        (
            "model.source_word_dropout=1",
            "model.source_word_dropout must be in [0, 1). Received: model.source_word_dropout=1",
        ),
        (
            "model.late_dropout=1.0 model.late_dropout_after=3",
            "model.late_dropout must be in [0, 1) or null. Received: model.late_dropout=1.0",
        ),
        ("model.late_dropout=0.3", "model.late_dropout needs model.late_dropout_after > 0 epochs. Received: 0"),
        (
            "model.late_dropout=0.3 model.late_dropout_after=2 model.dropout=0",
            "model.late_dropout needs model.dropout > 0",
        ),
        ("trainer.precision=float64", "trainer.precision must be one of"),
        ("data.name=wmt", "data.name must be one of"),
        ("data.bucket_width=-2", "data.bucket_width must be >= 0. Received: -2"),
        ("seed=-1", "seed must be in [0, 2**32). Received: -1"),
        ("data.seed=4294967296", "data.seed must be in [0, 2**32). Received: 4294967296"),
        ("optim.cooldown=1.5", "optim.cooldown must be in [0, 1]. Received: 1.5"),
        ("optim.weight_decay=-0.01", "optim.weight_decay must be >= 0. Received: -0.01"),
        ("data.subword_sampling=-0.1", "data.subword_sampling must be >= 0. Received: -0.1"),
        ("data.subword_sampling=0.5 data.tokenizer.model_type=bpe", "needs data.tokenizer.model_type=unigram"),
        (
            "data.tokenized=true",
            "data.tokenized applies to data=multi30k only. Received: data.tokenized=true with data=dates",
        ),
        (
            "trainer.monitor=bleu",
            "trainer.monitor must be one of val_loss, val_ppl, val_accuracy, val_bleu. Received: 'bleu'",
        ),
        ("trainer.monitor=val_bleu", "trainer.monitor=val_bleu needs trainer.val_bleu=true"),
        ("trainer.patience=-1", "trainer.patience must be >= 0. Received: -1"),
        ("optim.gradient_accumulation_steps=0", "optim.gradient_accumulation_steps must be positive. Received: 0"),
        ("decode.sampling_topk=-1 decode.beam_size=1", "decode.sampling_topk must be >= 0. Received: sampling_topk=-1"),
        (
            "decode.sampling_topk=0 decode.beam_size=4",
            "decode.sampling_topk samples with beam_size=1 only. Received: sampling_topk=0, beam_size=4",
        ),
        (
            "decode.sampling_temperature=0",
            "decode.sampling_temperature must be positive. Received: sampling_temperature=0.0",
        ),
        (
            "decode.sampling_topp=1.5 decode.sampling_topk=0 decode.beam_size=1",
            "decode.sampling_topp must be in (0, 1]. Received: sampling_topp=1.5",
        ),
        ("decode.sampling_topp=0.9", "decode.sampling_topp applies to sampling: set sampling_topk=0"),
    ],
)
def test_bad_values_are_rejected_before_any_data_is_read(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(compose_config(*override.split()))


@pytest.mark.parametrize(
    "args, message",
    [
        (["model.nope=1"], "model.nope"),
        (["model.num_layers=two"], "model.num_layers"),
        (["model=huge"], "model/huge"),
        (["model.hidden_dim=31"], "hidden_dim=31, num_heads=2"),
        (["trainer.init_from=/no/such/run"], "trainer.init_from=/no/such/run: no such run directory or weights file"),
        (["data=parallel"], "data.train.source"),
        (
            [
                "data=parallel",
                "data.train.source=/no/such.en",
                "data.train.target=/no/such.de",
                "data.val.source=/no/such.en",
                "data.val.target=/no/such.de",
            ],
            "/no/such.en",
        ),
    ],
)
def test_config_and_path_mistakes_end_with_one_clear_line(monkeypatch, capsys, tmp_path, args, message):
    status, _, stderr = train_main(monkeypatch, capsys, "debug=smoke", *args, f"hydra.run.dir={tmp_path / 'run'}")
    assert status == 2
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and message in lines[-1], stderr[-2000:]
    assert "Traceback" not in stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.e2e
def test_a_mistake_ends_the_kmt_train_process_with_one_clear_line(tmp_path):
    result = run_cli("train", "debug=smoke", "model.hidden_dim=31", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: model.hidden_dim must be divisible by model.num_heads. Received: hidden_dim=31, num_heads=2"
    )


def test_mismatched_parallel_files_name_both_files(tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\nthree\n")
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    cfg = compose_config(
        "data=parallel",
        f"data.train.source={tmp_path / 'a.en'}",
        f"data.train.target={tmp_path / 'a.de'}",
        f"data.val.source={tmp_path / 'a.en'}",
        f"data.val.target={tmp_path / 'a.de'}",
    )
    with pytest.raises(DataError, match="a.en has 3 lines but .*a.de has 2"):
        train(cfg, tmp_path / "run")


@pytest.mark.e2e
@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
# (experiment=multi30k_de_en is multi30k_en_de's pipeline the other way round: tests/test_config.py composes it)
@pytest.mark.parametrize("data", [["experiment=multi30k_en_de"], ["data=spa_eng"]], ids=str)
def test_smoke_run_on_a_slice_of_a_real_corpus(tmp_path, data):
    cfg = compose_config(*data, "data.download=false", "trainer.export=false")
    train(cfg, tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert 0 < metrics["val"]["pairs"] <= 300 and 0 < metrics["test"]["pairs"] <= 300  # data.limit=300 (smoke)
    assert 0 <= metrics["test"]["bleu"] <= 100
    kept = json.loads((tmp_path / "data" / "meta.json").read_text())["splits"]["train"]["pairs"]
    assert 0.9 * cfg.data.limit <= kept <= cfg.data.limit  # the smoke trains on the corpus's sentences


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
def test_a_smoke_run_on_multi30k_keeps_nearly_all_its_pairs(tmp_path):
    # debug=smoke's small vocabulary spells a caption nearly letter by letter: its model.max_length must hold them,
    # with the tiny model of `kmt-train data=multi30k debug=smoke` as with a recipe's.
    cfg = compose_config("data=multi30k", "data.download=false")
    prepared = prepare_data(cfg.data, cfg.model, tmp_path, OmegaConf.to_yaml(cfg, resolve=True))
    kept = {name: len(prepared.split(name)) for name in prepared.names}
    assert all(0.9 * cfg.data.limit <= pairs <= cfg.data.limit for pairs in kept.values()), kept


@pytest.mark.e2e
@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
def test_smoke_run_on_multi30k_tok_copies_scores_without_retokenizing(tmp_path):
    cfg = compose_config(
        "experiment=multi30k_en_de", "data.tokenized=true", "data.download=false", "trainer.export=false"
    )
    train(cfg, tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert "tok:none" in metrics["val"]["bleu_signature"] and "tok:none" in metrics["test"]["bleu_signature"]
    pieces = [line.split("\t")[0] for line in (tmp_path / "tokenizer" / "joint.vocab").read_text().splitlines()]
    cased = [piece for piece in pieces if piece != piece.lower() and not piece.startswith("<")]  # <0x0A>: bytes
    assert not cased  # the subwords were learned from the lowercased tok/ text


def test_a_built_in_corpus_takes_distilled_targets_line_for_line(tmp_path):
    from kmt.data import ParallelText, retargeted

    train = ParallelText(["a b", "c"], ["x y", "z"], "train.en", "train.de")
    (tmp_path / "distilled.de").write_text("X Y\nZ\n")
    assert retargeted(train, tmp_path / "distilled.de", "multi30k").target == ["X Y", "Z"]
    (tmp_path / "short.de").write_text("X Y\n")
    with pytest.raises(DataError, match=r"^the multi30k training sources has 2 lines but .*short.de has 1"):
        retargeted(train, tmp_path / "short.de", "multi30k")
    with pytest.raises(ConfigError, match="data=wmt14_en_de mixes three"):
        retargeted(train, tmp_path / "distilled.de", "wmt14_en_de")
    from kmt.data import load_corpus

    with pytest.raises(ConfigError, match=r"give them as data.train.target=FILE"):  # the recipe, without them
        load_corpus(compose_config("experiment=multi30k_en_de_student").data)


@pytest.mark.e2e
def test_a_student_trains_on_its_teachers_translations_through_to_its_export(smoke_run, multi30k_head, tmp_path):
    # The recipe's two commands (docs/training.md#distillation), the dates model standing in for the teacher
    sources = multi30k_head / "multi30k" / "train.en"
    result = run_cli("translate", smoke_run / "export", "--input", sources, "--output", tmp_path / "distilled.de")
    assert result.returncode == 0, result.stderr[-3000:]
    student = tmp_path / "student"
    overrides = ["debug=smoke", "data.limit=300", "data.num_train=300", "trainer.max_minutes=0"]
    result = run_cli(
        "train", "experiment=multi30k_en_de_student", f"data.train.target={tmp_path / 'distilled.de'}", *overrides,
        "model.num_layers=1", f"hydra.run.dir={student}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (student / "export" / "saved_model.pb").is_file()
    distilled = (tmp_path / "distilled.de").read_text().splitlines()[:300]
    assert (student / "data" / "train.target.txt").read_text().splitlines() == distilled
    config = OmegaConf.load(student / "config.yaml")
    assert (config.model.num_decoder_layers, config.data.name) == (1, "multi30k")
