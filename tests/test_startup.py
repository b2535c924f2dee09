"""TensorFlow's native start-up lines are kept out of kmt's output; everything else written to stderr still shows."""

import gc
import os
import subprocess
import sys

import pytest

from kmt._startup import _STARTUP_NOISE, filtered_startup_logs, paused_gc

NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "I0000 00:00:1795450681.343016    4653 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will "
    "not be used.\n",
    "I0000 00:00:1795450681.415908    4653 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    "available CPU instructions in performance-critical operations.\n",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate "
    "compiler flags.\n",
    "E0000 00:00:1795450685.679534    4653 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: Failed "
    "call to cuInit: UNKNOWN ERROR (303)\n",
]
KEPT = [
    "E0000 00:00:1795450685.679534    4653 saved_model.cc:1] a native error that is not the CUDA probe\n",
    "UserWarning: a Python warning (a process's sys.stderr writes to descriptor 2 too)\n",
]


def test_the_known_start_up_lines_are_dropped_and_the_rest_kept_in_order(capfd, monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    with filtered_startup_logs():
        os.write(2, "".join(NOISE[:2] + KEPT[:1] + NOISE[2:] + KEPT[1:]).encode())  # as C++ writes, below Python
    print("after", file=sys.stderr)  # stderr works again once the block ends
    assert capfd.readouterr().err == "".join(KEPT) + "after\n"


def test_tf_cpp_min_log_level_0_turns_the_filter_off(capfd, monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    with filtered_startup_logs():
        os.write(2, "".join(NOISE).encode())
    assert capfd.readouterr().err == "".join(NOISE)


def test_a_command_running_tensorflow_prints_nothing():
    """Run for real: with the filter off, this TensorFlow prints start-up lines the filter knows; with it on (a kmt
    command, which imports `kmt.cli` first), none."""
    script = "import kmt.cli, tensorflow as tf; print(int(tf.constant(1) + 1))"
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"} | {"KERAS_BACKEND": "tensorflow"}
    shown = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env | {"TF_CPP_MIN_LOG_LEVEL": "0"},
        timeout=600,
    )
    quiet = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert shown.returncode == quiet.returncode == 0 and shown.stdout == quiet.stdout == "2\n"
    assert any(_STARTUP_NOISE.match(line) for line in shown.stderr.splitlines()), shown.stderr
    assert quiet.stderr == ""


def test_importing_kmt_changes_nothing_and_importing_its_layers_registers_them():
    """A library user's `import kmt` leaves the import system, the environment and stderr alone; `import kmt.layers`
    registers kmt's layers with Keras (so a model.keras that holds them loads)."""
    script = (
        "import os, sys; finders = list(sys.meta_path); import kmt; "
        "print(sys.meta_path == finders, 'TF_CPP_MIN_LOG_LEVEL' in os.environ); "
        "import keras, kmt.layers; print(keras.saving.get_registered_object('kmt>MultiHeadAttention').__name__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0 and result.stdout == "True False\nMultiHeadAttention\n", result.stdout + result.stderr


def test_importing_kmt_and_its_serving_and_translating_modules_imports_neither_keras_nor_tensorflow():
    """TensorFlow (which imports Keras, JAX and matplotlib itself) takes seconds to import: kmt-serve opens its port
    before it loads the model, and kmt-translate on a CTranslate2 directory never needs it."""
    script = (
        "import sys, kmt, kmt.cli.serve, kmt.cli.translate, kmt.cli.align, kmt.serving.app, kmt.inference.ctranslate2; "
        "print(' '.join(sorted({'keras', 'tensorflow', 'matplotlib', 'jax'} & set(sys.modules))))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout == "\n", result.stdout + result.stderr


# Runs a console script's `main` with the arguments after `-c`, then prints which heavy modules it imported
IMPORTED_BY = (
    "import atexit, sys, importlib; "
    "atexit.register(lambda: print('imported:', *sorted({'keras', 'tensorflow', 'torch'} & set(sys.modules)), "
    "file=sys.stderr)); "
    "importlib.import_module(sys.argv[1]).main(sys.argv[2:])"
)


def test_commands_decoding_through_ctranslate2_import_neither_keras_nor_tensorflow(smoke_run, tmp_path):
    from kmt.cli import export

    export.main([str(smoke_run), "--format", "ctranslate2", "--output", str(tmp_path / "ct2")])
    (tmp_path / "src").write_text("5 May 1999\nJuly 4, 2021\n")
    (tmp_path / "page.html").write_text("<p>5 May <b>1999</b></p>")
    (tmp_path / "ref").write_text("1999-05-05\n2021-07-04\n")
    ct2 = str(tmp_path / "ct2")
    for command in [
        ["kmt.cli.translate", ct2, "--input", str(tmp_path / "src"), "--alignments"],
        ["kmt.cli.translate", ct2, str(tmp_path / "page.html"), "--output", str(tmp_path / "page.de.html")],
        ["kmt.cli.evaluate", ct2, "--source", str(tmp_path / "src"), "--reference", str(tmp_path / "ref")],
    ]:
        result = subprocess.run(
            [sys.executable, "-c", IMPORTED_BY, *command], capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stderr.splitlines()[-1] == "imported:", (command, result.stderr[-3000:])
    assert "<b>" in (tmp_path / "page.de.html").read_text()


def test_a_commands_keras_import_leaves_out_what_kmt_does_not_use_and_the_plots_still_import_it(tmp_path):
    """With the TensorFlow backend, a command's import of Keras skips JAX, SciPy and pyplot (seconds of start-up);
    they import afterwards as usual. Under JAX, Keras imports JAX itself. Either way the import ran with the garbage
    collector paused: it is on again after, with the import's objects frozen out of its collections."""
    script = (
        "import gc, sys, kmt.cli, keras; print(' '.join(sorted({'jax', 'scipy', 'matplotlib'} & set(sys.modules)))); "
        "print(gc.isenabled(), gc.get_freeze_count() > 100_000); "
        "import jax, matplotlib.pyplot; print(keras.backend.backend(), jax.numpy.add(1, 1))"
    )
    env = os.environ | {"KERAS_HOME": str(tmp_path)}  # no keras.json there: KERAS_BACKEND alone decides
    for backend, deferred_left in [("tensorflow", ""), ("jax", "jax scipy")]:
        result = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env=env | {"KERAS_BACKEND": backend},
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.splitlines() == [deferred_left, "True True", f"{backend} 2"], result.stdout


def test_paused_gc_restores_the_collector_as_it_was_and_freezes_only_when_asked():
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with pytest.raises(RuntimeError), paused_gc():
        assert not gc.isenabled()
        raise RuntimeError("the block fails")
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    gc.disable()
    try:
        with paused_gc(freeze=True):
            kept = [[] for _ in range(1000)]
        assert not gc.isenabled()  # it was off before: still off
        assert gc.get_freeze_count() >= frozen + len(kept)
    finally:
        gc.unfreeze()
        gc.enable()
