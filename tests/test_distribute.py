"""Data parallelism (`trainer.distribute`, kmt.training.distribute) on this machine's CPU: two devices step as one
device with the same global batch; and every mode runs the whole command a user runs, on two devices (TensorFlow:
two logical CPU devices; JAX: two host devices, or two worker processes on 127.0.0.1), killed by SIGKILL after its
first epoch and run again: it resumes, averages its last checkpoints, scores, exports, and the export translates."""

import contextlib
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

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 400  # seconds any process here may take


def steps_apart(backend, prepared, work, **env):
    """tests/distributed_steps.py's figures: 3 steps on one device and on two, the same global batch."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.distributed_steps", str(prepared), str(work)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=os.environ | {"KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"} | env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_tensorflow_mirrored_on_two_cpu_devices_steps_as_one_device(prepared_smoke, tmp_path):
    figures = steps_apart("tensorflow", prepared_smoke, tmp_path)
    assert figures["moved"] > 1e-2  # the steps changed the weights, so their agreement means something
    assert figures["max_difference"] < 1e-4


@pytest.mark.e2e
def test_jax_data_parallel_on_two_host_devices_steps_as_one_device(prepared_smoke, tmp_path):
    figures = steps_apart("jax", prepared_smoke, tmp_path, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    assert figures["moved"] > 1e-2
    assert figures["max_difference"] < 1e-4


@contextlib.contextmanager
def reserved_port():
    """A port of 127.0.0.1 that the OS chose, held bound (SO_REUSEPORT, not listening) until the block ends, so that
    no other socket takes it while the coordinator, whose gRPC server also binds with SO_REUSEPORT, starts on it."""
    with socket.socket() as reservation:
        reservation.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        reservation.bind(("127.0.0.1", 0))
        yield reservation.getsockname()[1]


def train_command(run_dir, prepared, *overrides):
    """kmt-train's command line for a 2-epoch smoke run from `prepared` that averages its 2 epochs' checkpoints."""
    return [
        sys.executable,
        "-m",
        "kmt.cli.train",
        "debug=smoke",
        "data=prepared",
        f"data.path={prepared}",
        "trainer.epochs=2",
        "trainer.average_last=2",
        "trainer.verbose=2",
        *overrides,
        f"hydra.run.dir={run_dir}",
    ]


def start(command, log, **env):
    """Starts `command` in ROOT with the variables of `env` added, its output appended to the file `log`."""
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"} | env
    env = {name: value for name, value in env.items() if value is not None}  # None: the variable unset
    with open(log, "a") as output:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)


def start_workers(run_dir, prepared, logs, port):
    """Two JAX processes of one multi_worker run on 127.0.0.1:`port`, the same command line but for their process
    id."""
    command = train_command(
        run_dir,
        prepared,
        "trainer.distribute=multi_worker",
        f"trainer.coordinator=127.0.0.1:{port}",
        "trainer.num_processes=2",
    )
    return [
        start(command, logs / f"worker{index}.log", KERAS_BACKEND="jax", KERAS_DISTRIBUTION_PROCESS_ID=str(index))
        for index in (0, 1)
    ]


def kill_after_first_epoch(processes, run_dir, log):
    """Kills `processes` by SIGKILL once the run's resume state holds its first epoch, before the run ends."""
    first = run_dir / "checkpoints" / "backup" / "training_metadata.json"
    deadline = time.monotonic() + TIMEOUT
    while not first.exists() and time.monotonic() < deadline and all(p.poll() is None for p in processes):
        time.sleep(0.05)
    for process in processes:  # a multi_worker run's worker first: its chief, waiting on it, is killed too
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert first.exists(), log.read_text()[-3000:]
    assert not (run_dir / "metrics.json").exists()  # killed before the end


def finish(processes, logs):
    """Waits for `processes` (killing them past `TIMEOUT`); returns the text of their `logs`."""
    deadline = time.monotonic() + TIMEOUT
    try:
        for process in processes:
            process.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    texts = [log.read_text() for log in logs]
    for process, text in zip(processes, texts):
        assert process.returncode == 0, text[-3000:]
    return texts


def fingerprints(texts):
    return [re.findall(r"trained weights: sha256 (\w+)", text)[-1] for text in texts]


def epochs_in(run_dir):
    with open(run_dir / "logs" / "history.csv") as f:
        return [int(row["epoch"]) for row in csv.DictReader(f)]


def check_the_whole_run(run_dir, log, prepared):
    """A run of `train_command` resumed after a kill: every epoch trained once, at the learning-rate step it stopped
    at, its 2 checkpoints averaged, val and test scored, and an export that translates two test sentences."""
    assert log.count("resuming after epoch") == 1
    assert epochs_in(run_dir) == [0, 1]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    steps_per_epoch = int(re.findall(r"(\d+) steps an epoch", log)[-1])
    assert metrics["train"]["steps"] == 2 * steps_per_epoch  # the learning rate's step, counted once an update
    assert metrics["train"]["averaged_checkpoints"] == 2  # the checkpoint of the epoch before the kill included
    assert (run_dir / "checkpoints" / "average_last2.weights.h5").exists()
    assert {"val", "test", "export"} <= metrics.keys()
    sources = (prepared / "test.source.txt").read_text().splitlines()[:2]
    result = run_cli("translate", run_dir / "export", input="\n".join(sources) + "\n", timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    translations = result.stdout.splitlines()
    assert len(translations) == len(sources) and all(line.strip() for line in translations), translations


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_mirrored_on_two_devices_runs_the_whole_command_and_resumes_after_a_kill(backend, prepared_smoke, tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "train.log"
    command = train_command(run_dir, prepared_smoke, "trainer.distribute=mirrored")
    env = {"KERAS_BACKEND": backend}
    if backend == "tensorflow":  # this CPU split in two logical devices, then the same command
        command[1:3] = ["-m", "tests.logical_devices", "2", "kmt.cli.train"]
    else:
        # compiled at XLA's level 0, as tests/conftest.py sets for every JAX process; the JAX bench's test
        # (tests/test_bench.py) runs the whole command at XLA's own level, as users get it
        env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    kill_after_first_epoch([start(command, log, **env)], run_dir, log)
    (text,) = finish([start(command, log, **env)], [log])
    assert text.count("data parallel (trainer.distribute=mirrored): 2 devices in 1 process") == 2
    check_the_whole_run(run_dir, text, prepared_smoke)


@pytest.mark.e2e
def test_two_workers_train_one_model_that_only_the_chief_writes_and_after_a_kill_resume_every_epoch_once(
    prepared_smoke, tmp_path
):
    run_dir, logs = tmp_path / "run", [tmp_path / "worker0.log", tmp_path / "worker1.log"]
    with reserved_port() as port:
        kill_after_first_epoch(start_workers(run_dir, prepared_smoke, tmp_path, port)[::-1], run_dir, logs[0])
        texts = finish(start_workers(run_dir, prepared_smoke, tmp_path, port), logs)
    check_the_whole_run(run_dir, texts[0], prepared_smoke)
    chief, worker = fingerprints(texts)
    assert chief == worker
    assert texts[1].count("resuming after epoch") == 1
    train_log = (run_dir / "train.log").read_text()
    assert "this is process 0" in train_log and "this is process 1" not in train_log  # the worker's log stays its own
    assert "this is process 1" in texts[1] and "val: loss" not in texts[1]  # it scores nothing either


@pytest.mark.e2e
@pytest.mark.parametrize(
    "backend, overrides, message",
    [
        ("jax", ["trainer.distribute=multi_worker"], "trainer.distribute=multi_worker needs its cluster"),
        ("tensorflow", ["trainer.distribute=multi_worker"], "run every worker with KERAS_BACKEND=jax"),
        ("jax", ["trainer.distribute=everywhere"], "trainer.distribute must be one of none, mirrored, multi_worker"),
        (
            "jax",
            [
                "trainer.distribute=multi_worker",
                "trainer.coordinator=127.0.0.1:1",
                "trainer.num_processes=2",
                "trainer.process_id=0",
                "data=multi30k",
            ],
            "trains from prepared data: run kmt-prepare",
        ),
    ],
)
def test_a_distribution_that_cannot_run_stops_with_one_line_before_any_data_is_read(
    tmp_path, backend, overrides, message
):
    run_dir = tmp_path / "run"
    env = {
        "KERAS_BACKEND": backend,
        **{
            variable: ""
            for variable in (
                "KERAS_DISTRIBUTION_JOB_ADDRESSES",
                "KERAS_DISTRIBUTION_NUM_PROCESSES",
                "KERAS_DISTRIBUTION_PROCESS_ID",
            )
        },
    }
    result = run_cli("train", "debug=smoke", *overrides, f"hydra.run.dir={run_dir}", env=env, timeout=120)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert message in last and "Traceback" not in result.stderr
    assert not (run_dir / "data").exists() and not (run_dir / "tokenizer").exists()
