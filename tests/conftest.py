"""Shared fixtures. Keras reads KERAS_BACKEND at import, so CI runs the layer tests once per backend."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Every test starts in float32, whatever an earlier test set. (No reseeding here: `tf.random.set_seed` clears
    TensorFlow's kernel cache, which deletes the SentencePiece resources of tokenizers that module fixtures made.)"""
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """One `kmt-train debug=smoke` run (dates, greedy export), shared read-only by the CLI and export tests."""
    from tests.helpers import run_cli

    run_dir = tmp_path_factory.mktemp("smoke") / "run"
    result = run_cli("train", "debug=smoke", "trainer.epochs=2", f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir
