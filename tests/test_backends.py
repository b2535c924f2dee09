"""kmt-train on every Keras backend from one prepared directory: JAX without TensorFlow, PyTorch where it is
installed, and the same val loss as TensorFlow from the same data and seed."""

import csv
import functools
import json
import os
import subprocess
import sys

import pytest

from kmt.training import train
from tests.helpers import compose_config, optional, run_cli, shared_once

# A `tensorflow` package that cannot be imported: it writes the id of each process that tries, then refuses.
FAKE_TENSORFLOW = """import os
with open(os.environ["KMT_TEST_TF_ATTEMPTS"], "a") as attempts:
    attempts.write(f"{os.getpid()}\\n")
raise ImportError("no TensorFlow on this machine (a test's stand-in)")
"""


def train_under(backend, *overrides, env=None, cwd=None):
    """`python -m kmt.cli.train debug=smoke overrides...` under `backend`: `(process, stdout, stderr)`."""
    environment = os.environ | {"KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"} | (env or {})
    process = subprocess.Popen(
        [sys.executable, "-m", "kmt.cli.train", "debug=smoke", *overrides],
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = process.communicate(timeout=600)
    return process, stdout, stderr


def history(run_dir):
    with open(run_dir / "logs" / "history.csv") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="session")
def jax_run(prepared_smoke, tmp_path_factory):
    """Two epochs under JAX where `import tensorflow` fails, trained once for all workers: `(run_dir, pid of the
    training process, pids that tried to import TensorFlow)`, read-only."""
    return shared_once(tmp_path_factory, "jax_run", functools.partial(_train_without_tensorflow, prepared_smoke))


def _train_without_tensorflow(prepared_smoke, root):
    fake = root / "fake"
    (fake / "tensorflow").mkdir(parents=True)
    (fake / "tensorflow" / "__init__.py").write_text(FAKE_TENSORFLOW)
    attempts = root / "attempts.txt"
    attempts.touch()
    run_dir = root / "run"
    process, _, stderr = train_under(
        "jax",
        "data=prepared",
        f"data.path={prepared_smoke}",
        "trainer.epochs=2",
        "trainer.average_last=2",
        f"hydra.run.dir={run_dir}",
        env={
            "PYTHONPATH": f"{fake}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "KMT_TEST_TF_ATTEMPTS": str(attempts),
        },
    )
    assert process.returncode == 0, stderr[-3000:]
    (root / "pid").write_text(str(process.pid))


def _jax_run_record(root):
    return root / "run", int((root / "pid").read_text()), set((root / "attempts.txt").read_text().split())


@pytest.mark.e2e
def test_a_jax_run_from_prepared_data_trains_scores_and_never_imports_tensorflow(jax_run):
    run_dir, pid, tried = _jax_run_record(jax_run)
    assert str(pid) not in tried  # the training process never asked for TensorFlow
    assert tried  # the export's own process did, and was refused: so the stand-in works
    assert [row["epoch"] for row in history(run_dir)] == ["0", "1"]  # Keras counts epochs from 0
    checkpoints = run_dir / "checkpoints"
    assert {"epoch_001.weights.h5", "epoch_002.weights.h5", "average_last2.weights.h5"} <= {
        path.name for path in checkpoints.iterdir()
    }
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert {"loss", "bleu", "chrf"} <= set(metrics["val"]) and "test" in metrics
    assert metrics["train"]["averaged_checkpoints"] == 2 and "export" not in metrics
    assert (run_dir / "model.keras").is_file() and (run_dir / "tokenizer" / "joint.model").is_file()
    assert not (run_dir / "export").exists()
    assert f"kmt-export {run_dir} --average 2" in (run_dir / "train.log").read_text()  # what to run where TF is


@pytest.mark.e2e
def test_kmt_export_makes_the_saved_model_of_a_jax_run_where_tensorflow_is(jax_run, tmp_path):
    run_dir = jax_run / "run"
    result = run_cli("export", run_dir, "--average", "2", "--output", tmp_path / "export")
    assert result.returncode == 0, result.stderr[-3000:]
    translated = run_cli("translate", tmp_path / "export", input="march 3, 2021\n12/25/1999\n\n")
    assert translated.returncode == 0, translated.stderr[-3000:]
    lines = translated.stdout.split("\n")[:-1]
    assert len(lines) == 3 and all(line.strip() for line in lines[:2]) and lines[2] == ""


@pytest.mark.e2e
def test_a_jax_run_resumed_after_an_epoch_ends_with_the_uninterrupted_runs_losses(prepared_smoke, jax_run, tmp_path):
    run_dir = tmp_path / "run"
    common = [
        "data=prepared",
        f"data.path={prepared_smoke}",
        "trainer.average_last=2",
        f"hydra.run.dir={run_dir}",
        "trainer.export=false",
    ]
    for epochs in (1, 2):  # the second command resumes the first's run after its epoch
        process, _, stderr = train_under("jax", *common, f"trainer.epochs={epochs}")
        assert process.returncode == 0, stderr[-3000:]
    resumed, whole = history(run_dir), history(jax_run / "run")
    for key in ("loss", "val_loss"):
        assert [float(row[key]) for row in resumed] == pytest.approx([float(row[key]) for row in whole], rel=1e-5)


@pytest.mark.e2e
def test_tensorflow_and_jax_train_to_the_same_val_loss_from_the_same_start(prepared_smoke, jax_run, tmp_path):
    """Both backends fine-tune one run's weights (`trainer.init_from`: a fresh optimizer, so the same start; here the
    JAX run's) for two epochs on the same batches, without dropout (whose random draws differ by backend); from their
    own random initializations, runs of this size differ more between two seeds than between backends."""
    start = jax_run / "run"
    same = [
        "data=prepared",
        f"data.path={prepared_smoke}",
        "trainer.epochs=2",
        "model.dropout=0",
        "trainer.export=false",
        f"trainer.init_from={start}",
    ]
    train(compose_config(*same), tmp_path / "tf")
    process, _, stderr = train_under("jax", *same, f"hydra.run.dir={tmp_path / 'jax'}")
    assert process.returncode == 0, stderr[-3000:]
    tf_loss, jax_loss = (
        json.loads((tmp_path / name / "metrics.json").read_text())["val"]["loss"] for name in ("tf", "jax")
    )
    assert jax_loss == pytest.approx(tf_loss, rel=0.02)


@pytest.mark.e2e
def test_a_pytorch_run_from_prepared_data_resumes_averages_and_beam_searches(prepared_smoke, tmp_path):
    optional("torch", 'pip install "kmt[torch]"')
    run_dir = tmp_path / "run"
    common = [
        "data=prepared",
        f"data.path={prepared_smoke}",
        f"hydra.run.dir={run_dir}",
        "trainer.export=false",
        "trainer.average_last=2",
        "decode.beam_size=2",
    ]
    for epochs in (1, 2):  # the second command resumes the first's run
        process, _, stderr = train_under("torch", *common, f"trainer.epochs={epochs}")
        assert process.returncode == 0, stderr[-3000:]
    log = (run_dir / "train.log").read_text()
    assert "Keras torch backend" in log and "resuming the training stream after its first 6 batches" in log
    assert [row["epoch"] for row in history(run_dir)] == ["0", "1"]
    assert (run_dir / "checkpoints" / "average_last2.weights.h5").is_file() and (run_dir / "model.keras").is_file()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert {"loss", "bleu"} <= set(metrics["val"]) and metrics["train"]["averaged_checkpoints"] == 2


@pytest.mark.parametrize(
    "backend, line",
    [
        (
            "torch",
            'error: KERAS_BACKEND=torch needs PyTorch, which is not installed: pip install "kmt[torch]" (for the '
            "CPU-only build, first pip install torch from PyTorch's CPU index: docs/gpu.md)",
        ),
        (
            "jax",
            'error: KERAS_BACKEND=jax needs JAX, which is not installed: pip install "jax[cpu]", or "kmt[jax-cuda]" '
            "for CUDA 12 GPUs (docs/gpu.md)",
        ),
    ],
)
def test_a_backend_that_is_not_installed_is_one_line_naming_what_to_install(tmp_path, backend, line):
    # The library as where it was never installed: a package of its name on the path whose import fails as a
    # missing module's does.
    (tmp_path / backend).mkdir()
    (tmp_path / backend / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{backend}'\", name={backend!r})\n"
    )
    run_dir = tmp_path / "run"
    process, _, stderr = train_under(
        backend,
        f"hydra.run.dir={run_dir}",
        env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
    )
    assert process.returncode == 1 and stderr.splitlines() == [line], stderr[-3000:]
    assert not run_dir.exists()
