"""Nothing a user feeds kmt may crash it silently or lose work: bad data, kills, Ctrl-C, NaN, concurrency."""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from kmt.errors import DataError, KmtError
from kmt.training import train
from tests.helpers import compose_config, run_cli, shared_once

# A few thousand generated pairs: epochs long enough (~100 steps) to be killed in the middle of one.
LONGER = ["debug=smoke", "data.num_train=3000", "data.limit=3000", "trainer.export=false"]
# The kill tests' uninterrupted run: 3 epochs of 57 batches, the weights and the resume state saved every 20 updates
# as well (which changes nothing it trains: the run killed at an epoch's end saves no update checkpoints).
REFERENCE = [*LONGER, "trainer.epochs=3", "trainer.save_every_updates=20"]


def _history(run_dir):
    with open(run_dir / "logs" / "history.csv") as f:
        return list(csv.DictReader(f))


def _write(path, lines, encoding="utf-8"):
    path.write_bytes("".join(line + "\n" for line in lines).encode(encoding))
    return path


def _parallel_args(tmp_path, source_lines, target_lines):
    source, target = _write(tmp_path / "train.src", source_lines), _write(tmp_path / "train.tgt", target_lines)
    return [
        "data=parallel",
        f"data.train.source={source}",
        f"data.train.target={target}",
        f"data.val.source={source}",
        f"data.val.target={target}",
        "trainer.export=false",
    ]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run of `REFERENCE`, trained once for every worker (here: no process to start)."""
    return shared_once(
        tmp_path_factory, "reliability_reference", lambda folder: train(compose_config(*REFERENCE[1:]), folder)
    )


def _assert_one_line_error(result, *needles):
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and all(n in last for n in needles), last


@pytest.mark.e2e
def test_killed_run_resumes_where_it_stopped(reference, tmp_path):
    killed = tmp_path / "killed"
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    process = subprocess.Popen(
        [sys.executable, "-m", "kmt.cli.train", *LONGER, "trainer.epochs=3", f"hydra.run.dir={killed}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first = killed / "checkpoints" / "backup" / "training_metadata.json"  # the resume state of epoch 1
    deadline = time.time() + 300
    while not first.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert first.exists() and not (killed / "metrics.json").exists()  # killed after epoch 1, before the end

    resumed = run_cli("train", *LONGER, "trainer.epochs=3", f"hydra.run.dir={killed}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming after epoch" in resumed.stdout + resumed.stderr
    expected, got = _history(reference), _history(killed)
    assert [row["epoch"] for row in got] == [row["epoch"] for row in expected] == ["0", "1", "2"]
    assert [float(r["learning_rate"]) for r in got] == pytest.approx([float(r["learning_rate"]) for r in expected])
    # The resumed epochs trained on the batches and dropout masks of the uninterrupted run, so they end as it did
    # (before, the stream restarted at its first batch and the masks at their first draw: losses 0.02-0.09 off).
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert [float(r[key]) for r in got] == pytest.approx([float(r[key]) for r in expected], rel=1e-5), key
    reference_metrics = json.loads((reference / "metrics.json").read_text())["train"]
    killed_metrics = json.loads((killed / "metrics.json").read_text())["train"]
    assert killed_metrics["steps"] == reference_metrics["steps"]  # the optimizer step carried over the kill


def _weights(path):
    import h5py

    arrays = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: arrays.update({name: item[()]}) if isinstance(item, h5py.Dataset) else None)
    return arrays


@pytest.mark.e2e
def test_run_killed_mid_epoch_resumes_at_the_update_it_saved(reference, tmp_path):
    # trainer.save_every_updates saves the resume state within epochs (57 batches here): a kill after update 20
    # resumes at batch 21 of epoch 1, on the batches, dropout masks and running means of the uninterrupted run.
    killed = tmp_path / "killed"
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    process = subprocess.Popen(
        [sys.executable, "-m", "kmt.cli.train", *REFERENCE, f"hydra.run.dir={killed}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first = killed / "checkpoints" / "backup" / "training_metadata.json"  # the resume state of update 20
    deadline = time.time() + 300
    while not first.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    state = json.loads(first.read_text())
    assert state["epoch"] == 0 and state["batch"] == state["update"] == 20, state  # killed mid-epoch

    resumed = run_cli("train", *REFERENCE, f"hydra.run.dir={killed}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "20 batches into epoch 1" in resumed.stdout + resumed.stderr
    expected, got = _history(reference), _history(killed)
    assert [row["epoch"] for row in got] == [row["epoch"] for row in expected] == ["0", "1", "2"]
    for key in ("loss", "accuracy", "val_loss", "val_accuracy", "learning_rate"):
        assert [float(r[key]) for r in got] == pytest.approx([float(r[key]) for r in expected], rel=1e-5), key
    names = sorted(p.name for p in (reference / "checkpoints").glob("update_*.weights.h5"))
    assert names == [f"update_{n:07d}.weights.h5" for n in (80, 100, 120, 140, 160)]  # the newest 5 (keep_checkpoints)
    assert sorted(p.name for p in (killed / "checkpoints").glob("update_*.weights.h5")) == names
    for name in names:  # trained after the kill: the uninterrupted run's weights, update for update
        want, have = _weights(reference / "checkpoints" / name), _weights(killed / "checkpoints" / name)
        assert want.keys() == have.keys()
        for key in want:
            assert have[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), (name, key)


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "SIGTERM"])
def test_a_stop_signal_saves_and_exits_cleanly(tmp_path, signum):
    # SIGTERM is what job schedulers (Slurm, Kubernetes) send before they kill: before, it ended kmt-train at once.
    run_dir = tmp_path / "run"
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    # A terminal's Ctrl-C: SIGINT at its default even when the tests run as a background job, which ignores it.
    process = subprocess.Popen(
        [sys.executable, "-m", "kmt.cli.train", *LONGER, "trainer.epochs=20", f"hydra.run.dir={run_dir}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 300
    while not (run_dir / "checkpoints" / "backup" / "training_metadata.json").exists() and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signum, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert "Traceback" not in stderr and last.startswith(f"error: interrupted by {signum.name}; "), last
    assert (run_dir / "checkpoints" / "interrupted.weights.h5").exists()
    if signum == signal.SIGTERM:  # what follows is the signal's alike
        resumed = run_cli("train", *LONGER, "trainer.epochs=2", f"hydra.run.dir={run_dir}")
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert [row["epoch"] for row in _history(run_dir)][-1] == "1"


def test_nan_stops_with_a_clear_message_and_keeps_the_last_good_checkpoint(smoke_run, tmp_path):
    run_dir = shutil.copytree(smoke_run, tmp_path / "run", ignore=shutil.ignore_patterns("export"))  # 2 good epochs
    kept = (run_dir / "checkpoints" / "epoch_002.weights.h5").read_bytes()
    with pytest.raises(KmtError, match="training diverged"):
        train(compose_config("trainer.epochs=3", "optim.lr_scale=1e12"), run_dir)
    assert (run_dir / "checkpoints" / "epoch_002.weights.h5").read_bytes() == kept
    assert not (run_dir / "checkpoints" / "epoch_003.weights.h5").exists()
    backup = json.loads((run_dir / "checkpoints" / "backup" / "training_metadata.json").read_text())
    assert backup["epoch"] == 2


@pytest.mark.e2e  # a run through to the export, twice
@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_trains_and_exports_float32(tmp_path, precision):
    train(compose_config(f"trainer.precision={precision}"), tmp_path)
    assert all(float(row["loss"]) < 1e3 for row in _history(tmp_path))
    # The SavedModel decodes in float32: no tensor of the half-precision type anywhere in its graph.
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel.FromString((tmp_path / "export" / "saved_model.pb").read_bytes())
    graph_text = text_format.MessageToString(proto.meta_graphs[0].graph_def)  # ops and functions, not the op list
    assert "DT_FLOAT" in graph_text
    assert {"mixed_float16": "DT_HALF", "mixed_bfloat16": "DT_BFLOAT16"}[precision] not in graph_text


def test_awkward_sentences_train_and_are_counted(tmp_path, caplog):
    words = ["one two", "three", "four five six", "seven"]
    sources = [f"{w} {i}" for i in range(60) for w in words]
    targets = [f"{w.upper()} {i}" for i in range(60) for w in words]
    sources[:6] = ["tab\tinside", "", "x" * 10_000, "emoji 😀🚀", "漢字とかな", "مرحبا بالعالم"]
    targets[:6] = ["TAB\tINSIDE", "EMPTY SOURCE", "LONG", "EMOJI 😀🚀", "日本語", "שלום עולם"]
    caplog.set_level("INFO", logger="kmt")
    metrics = train(compose_config(*_parallel_args(tmp_path, sources, targets)), tmp_path / "run")
    assert metrics["train"]["steps"] > 0
    assert "train: kept 238 of 240 pairs (dropped 1 empty, 1 longer than" in caplog.text


def _bad_parallel_files(tmp_path, case):
    """The overrides of a data=parallel run on training files with the mistake `case`, and what the error names."""
    good = [f"line {i}" for i in range(20)]
    if case == "lengths":
        return _parallel_args(tmp_path, good, good[:-1]), ("train.src has 20 lines", "train.tgt has 19")
    args = _parallel_args(tmp_path, good, good)
    if case == "empty":
        (tmp_path / "train.tgt").write_bytes(b"")
        return args, ("train.tgt", "empty")
    (tmp_path / "train.tgt").write_bytes(b"line 0\nline \xff 1\n" + b"x\n" * 18)
    return args, ("train.tgt", "line 2")


@pytest.mark.parametrize("case", ["lengths", "empty", "bytes"])
def test_bad_parallel_files_stop_with_file_and_line(tmp_path, case):
    args, needles = _bad_parallel_files(tmp_path, case)
    with pytest.raises(DataError) as error:
        train(compose_config(*args), tmp_path / "run")
    assert all(needle in str(error.value) for needle in needles), error.value


def test_kmt_train_stops_on_a_bad_file_with_one_line(tmp_path):
    # What a user sees of the DataError above: one line naming the file and the line, exit status 2, no traceback.
    args, needles = _bad_parallel_files(tmp_path, "bytes")
    _assert_one_line_error(run_cli("train", "debug=smoke", *args, f"hydra.run.dir={tmp_path / 'run'}"), *needles)


def test_translate_handles_a_thousand_awkward_lines(smoke_run, tmp_path):
    from kmt.cli import translate

    awkward = ["", "   ", "\t", "y" * 10_000, "😀 漢字 مرحبا", "Tuesday, March 5, 1996"]
    lines = [awkward[i % len(awkward)] for i in range(1000)]
    (tmp_path / "in.txt").write_bytes(("\n".join(lines) + "\n").encode())
    translate.main([str(smoke_run / "export"), "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out")])
    outputs = (tmp_path / "out").read_bytes().decode().split("\n")[:-1]
    assert len(outputs) == 1000
    assert all(outputs[i] == "" for i in range(1000) if not lines[i].strip())


def test_concurrent_requests_get_the_serial_answers(smoke_run):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    translate = tf.saved_model.load(str(smoke_run / "export")).signatures["translate"]
    requests = [[f"{day} March 19{day:02d}", "", f"the {day}th of may 2001"] for day in range(4, 28)]

    def answer(batch):
        return [t.decode() for t in translate(text=tf.constant(batch))["translation"].numpy()]

    serial = [answer(batch) for batch in requests]
    results, errors = {}, []

    def worker(thread):
        try:
            for i in range(50):
                index = (thread * 50 + i) % len(requests)
                results[(thread, i)] = (index, answer(requests[index]))
        except Exception as error:  # noqa: BLE001 (collected and asserted below)
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 400
    assert all(output == serial[index] for index, output in results.values())


def test_resuming_with_another_model_shape_is_a_clear_error(smoke_run, tmp_path):
    run_dir = shutil.copytree(smoke_run, tmp_path / "run", ignore=shutil.ignore_patterns("export"))  # 2 epochs
    with pytest.raises(KmtError, match="does not fit this model"):
        train(compose_config("trainer.export=false", "trainer.epochs=3", "model.hidden_dim=48"), run_dir)
