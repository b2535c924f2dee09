"""Data parallelism (`trainer.distribute`, kmt.training.distribute) on this machine's CPU: two devices step as one
device with the same global batch, two worker processes on 127.0.0.1 train one model that only the chief writes,
and a worker killed mid-run resumes with the chief to every epoch once."""

import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import run_cli

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 400  # seconds any process here may take


def steps_apart(backend, prepared, work, **env):
    """tests/distributed_steps.py's figures: 3 steps on one device and on two, the same global batch."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.distributed_steps", str(prepared), str(work)], cwd=ROOT, capture_output=True,
        text=True, timeout=TIMEOUT, env=os.environ | {"KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"} | env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_tensorflow_mirrored_on_two_cpu_devices_steps_as_one_device(prepared_smoke, tmp_path):
    figures = steps_apart("tensorflow", prepared_smoke, tmp_path)
    assert figures["moved"] > 1e-2  # the steps changed the weights, so their agreement means something
    assert figures["max_difference"] < 1e-4


def test_jax_data_parallel_on_two_host_devices_steps_as_one_device(prepared_smoke, tmp_path):
    figures = steps_apart("jax", prepared_smoke, tmp_path, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    assert figures["moved"] > 1e-2
    assert figures["max_difference"] < 1e-4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_workers(run_dir, prepared, epochs, logs):
    """Two JAX processes of one multi_worker run on 127.0.0.1, the same command line but for their process id."""
    port = free_port()
    command = [sys.executable, "-m", "kmt.cli.train", "debug=smoke", "data=prepared", f"data.path={prepared}",
               "trainer.distribute=multi_worker", f"trainer.coordinator=127.0.0.1:{port}", "trainer.num_processes=2",
               f"trainer.epochs={epochs}", "trainer.export=false", "trainer.verbose=2", f"hydra.run.dir={run_dir}"]
    workers = []
    for index in (0, 1):
        env = os.environ | {"KERAS_BACKEND": "jax", "KERAS_DISTRIBUTION_PROCESS_ID": str(index),
                            "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}
        log = open(logs / f"worker{index}.log", "a")
        workers.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
        log.close()
    return workers


def finish(workers, logs):
    """Waits for both workers (killing them past `TIMEOUT`); returns their logs."""
    deadline = time.monotonic() + TIMEOUT
    try:
        for worker in workers:
            worker.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    texts = [(logs / f"worker{index}.log").read_text() for index in (0, 1)]
    for worker, text in zip(workers, texts):
        assert worker.returncode == 0, text[-3000:]
    return texts


def fingerprints(texts):
    return [re.findall(r"trained weights: sha256 (\w+)", text)[-1] for text in texts]


def epochs_in(run_dir):
    with open(run_dir / "logs" / "history.csv") as f:
        return [int(row["epoch"]) for row in csv.DictReader(f)]


def test_two_workers_train_one_model_that_only_the_chief_writes_and_after_a_kill_resume_every_epoch_once(
        prepared_smoke, tmp_path):
    run_dir, epochs = tmp_path / "run", 3
    workers = start_workers(run_dir, prepared_smoke, epochs, tmp_path)
    first = run_dir / "checkpoints" / "epoch_001.weights.h5"
    deadline = time.monotonic() + TIMEOUT
    while not first.exists() and time.monotonic() < deadline and all(w.poll() is None for w in workers):
        time.sleep(0.05)
    assert first.exists(), (tmp_path / "worker0.log").read_text()[-3000:]
    workers[1].send_signal(signal.SIGKILL)  # the worker dies; its chief, waiting on it, is killed too
    workers[0].send_signal(signal.SIGKILL)
    for worker in workers:
        worker.wait()
    done = epochs_in(run_dir)
    assert done and done[-1] < epochs - 1, done  # killed before the end

    texts = finish(start_workers(run_dir, prepared_smoke, epochs, tmp_path), tmp_path)
    assert epochs_in(run_dir) == list(range(epochs))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    steps_per_epoch = int(re.search(r"(\d+) steps an epoch", texts[0]).group(1))
    assert metrics["train"]["steps"] == epochs * steps_per_epoch  # the learning rate's step, counted once an update
    chief, worker = fingerprints(texts)
    assert chief == worker
    assert texts[1].count("resuming after epoch") == 1
    for path in ["config.yaml", "metrics.json", "model.keras", "checkpoints/epoch_003.weights.h5",
                 "checkpoints/backup/latest.weights.h5"]:
        assert (run_dir / path).exists(), path
    train_log = (run_dir / "train.log").read_text()
    assert "this is process 0" in train_log and "this is process 1" not in train_log  # the worker's log stays its own
    assert "this is process 1" in texts[1] and "val: loss" not in texts[1]  # it scores nothing either


@pytest.mark.parametrize("backend, overrides, message", [
    ("jax", ["trainer.distribute=multi_worker"], "trainer.distribute=multi_worker needs its cluster"),
    ("tensorflow", ["trainer.distribute=multi_worker"], "run every worker with KERAS_BACKEND=jax"),
    ("jax", ["trainer.distribute=everywhere"], "trainer.distribute must be one of none, mirrored, multi_worker"),
    ("jax", ["trainer.distribute=multi_worker", "trainer.coordinator=127.0.0.1:1", "trainer.num_processes=2",
             "trainer.process_id=0", "data=multi30k"], "trains from prepared data: run kmt-prepare"),
])
def test_a_distribution_that_cannot_run_stops_with_one_line_before_any_data_is_read(tmp_path, backend, overrides,
                                                                                    message):
    run_dir = tmp_path / "run"
    env = {"KERAS_BACKEND": backend, **{variable: "" for variable in ("KERAS_DISTRIBUTION_JOB_ADDRESSES",
                                                                       "KERAS_DISTRIBUTION_NUM_PROCESSES",
                                                                       "KERAS_DISTRIBUTION_PROCESS_ID")}}
    result = run_cli("train", "debug=smoke", *overrides, f"hydra.run.dir={run_dir}", env=env, timeout=120)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert message in last and "Traceback" not in result.stderr
    assert not (run_dir / "data").exists() and not (run_dir / "tokenizer").exists()
