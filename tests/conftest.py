"""Shared fixtures. Keras reads KERAS_BACKEND at import, so CI runs the layer tests once per backend."""

import itertools
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# JAX, here under the JAX pass and in the JAX processes tests start, compiles the tests' tiny computations at XLA's
# backend optimization level 0: the same computation, compiled sooner (these tests check what is computed).
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
# TensorFlow's kernels (and oneDNN's OpenMP) one thread each, in the test processes and those they start: the tests'
# models are tiny, and two workers on two cores otherwise spend a tenth of their time in each other's threads.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import keras  # noqa: E402
import pytest  # noqa: E402

from tests.helpers import shared_folder, shared_once  # noqa: E402

OPTIONAL = "an optional dependency"  # in the reason of every skip for a missing optional package (helpers.optional)


SHARED_RUNS = {"smoke_run", "prepared_smoke", "jax_run"}  # session fixtures built once for all workers


# The longest end-to-end tests (a minute or more each on 2 cores), started first so that none is left to run alone at
# the end of the tier.
LONGEST = (
    "test_the_jax_bench_trains_under_jax",
    "test_mirrored_on_two_devices_runs_the_whole_command",
    "test_two_workers_train_one_model",
    "test_kmt_train_with_a_glossary_annotates",
    "test_an_imported_model_fine_tunes",
    "test_the_pages_commands_run_as_written",
    "test_the_multi30k_bench_runs_on_a_fresh_machine",
    "test_a_jax_run_resumed_after_an_epoch",
    "test_kmt_train_model_lstm_trains",
    "test_the_opus_mt_bench_imports",
    "test_the_steering_benches",
    "test_an_ensemble_export_decodes",
    "test_the_page_translates_as_the_api_does",
)


def pytest_collection_modifyitems(config, items):
    """The end-to-end tests first, the longest of them (`LONGEST`) ahead, then those that read a shared run, then the
    rest, each in their order: the long runs start early, and pytest-xdist's worksteal, which deals each worker a
    contiguous share to begin with, has the first worker build the shared runs while the others start on tests that
    need none."""
    items.sort(
        key=lambda item: (
            item.get_closest_marker("e2e") is None,
            not item.name.startswith(LONGEST),
            not SHARED_RUNS & set(item.fixturenames),
        )
    )


def _fail_optional_skips(report):
    """Under KMT_NO_OPTIONAL_SKIPS=1 (.ci/run), a test skipped because an optional dependency is missing fails
    instead: nothing user-facing drops out of CI unseen."""
    if report.skipped and os.environ.get("KMT_NO_OPTIONAL_SKIPS") == "1" and OPTIONAL in str(report.longrepr):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every optional dependency must be installed: {report.longrepr}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    _fail_optional_skips(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    _fail_optional_skips(report)
    return report


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Every test starts in float32, whatever an earlier test set. (No reseeding here: `tf.random.set_seed` clears
    TensorFlow's kernel cache, which deletes the SentencePiece resources of tokenizers that module fixtures made.)"""
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture(scope="session", autouse=True)
def _jax_compilation_cache(tmp_path_factory):
    """The JAX processes tests start keep what XLA compiles in JAX's persistent compilation cache, one folder for the
    run: a resumed run, a second worker or a later test with the same shapes loads the program instead of compiling it
    again (compiling is most of a tiny JAX run). A cache folder of the caller's own is left as it is."""
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        yield
        return
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(shared_folder(tmp_path_factory) / "jax_cache")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # the tests' programs each compile in under 1 s
    yield
    del os.environ["JAX_COMPILATION_CACHE_DIR"], os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]


def _cli_build(*args):
    """A `build` for `shared_once` that runs `kmt-<args[0]> args[1:] hydra.run.dir=FOLDER` in a fresh process."""

    def build(folder):
        from tests.helpers import run_cli

        result = run_cli(*args, f"hydra.run.dir={folder}")
        assert result.returncode == 0, result.stderr[-3000:]

    return build


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """One `kmt-train debug=smoke trainer.epochs=2` run (dates, greedy export), as a user first runs it, shared
    read-only by every test that reads a run or an export."""
    return shared_once(tmp_path_factory, "smoke_run", _cli_build("train", "debug=smoke", "trainer.epochs=2"))


@pytest.fixture(scope="session")
def prepared_smoke(tmp_path_factory):
    """`kmt-prepare debug=smoke` once a session, read-only for the tests that train from prepared data."""
    return shared_once(tmp_path_factory, "prepared_smoke", _cli_build("prepare", "debug=smoke"))


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
