"""Shared fixtures. Keras reads KERAS_BACKEND at import, so CI runs the layer tests once per backend."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# JAX, here under the JAX pass and in the JAX processes tests start, compiles the tests' tiny computations at XLA's
# backend optimization level 0: the same computation, compiled sooner (these tests check what is computed).
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import keras  # noqa: E402
import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """The end-to-end runs (marked slow) first, in their order, then the rest: under pytest-xdist the long runs start
    early and the short tests fill the workers' last minutes, instead of one worker running a minutes-long test at
    the end while the other waits."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Every test starts in float32, whatever an earlier test set. (No reseeding here: `tf.random.set_seed` clears
    TensorFlow's kernel cache, which deletes the SentencePiece resources of tokenizers that module fixtures made.)"""
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """One `kmt-train debug=smoke` run (dates, greedy export), shared read-only by the CLI and export tests.

    Trained once for the whole session, also under pytest-xdist, which makes a session fixture once in every worker:
    the first worker to ask trains it under a lock, in a folder of the run that every worker sees; the others wait
    for it, then read it."""
    import fcntl

    from tests.helpers import run_cli

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # each worker's base folder lies in the run's
    run_dir = shared / "smoke_run"
    with open(shared / "smoke_run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (run_dir / "metrics.json").exists():  # written last, so the run is whole
            result = run_cli("train", "debug=smoke", "trainer.epochs=2", f"hydra.run.dir={run_dir}")
            assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="session")
def prepared_smoke(tmp_path_factory):
    """`kmt-prepare debug=smoke` once a session (a worker's, under pytest-xdist), read-only for the tests that train
    from prepared data."""
    from tests.helpers import run_cli

    directory = tmp_path_factory.mktemp("prepared") / "smoke"
    result = run_cli("prepare", "debug=smoke", f"hydra.run.dir={directory}")
    assert result.returncode == 0, result.stderr[-3000:]
    return directory
