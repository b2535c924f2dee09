"""Shared helpers for end-to-end tests: compose the real configs, run the real console scripts."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kmt.config import composing


def compose_config(*overrides):
    """The smoke config with `overrides`, not validated (a test may check what a run does with a bad value)."""
    with composing() as compose:
        return compose(["debug=smoke", *overrides])


def shared_folder(tmp_path_factory):
    """A folder of this pytest run that every pytest-xdist worker sees: $KMT_TEST_SHARED where set (.ci/run: one
    folder for its default and e2e tiers), else the run's base temporary folder."""
    if os.environ.get("KMT_TEST_SHARED"):
        return Path(os.environ["KMT_TEST_SHARED"])
    shared = tmp_path_factory.getbasetemp()
    return shared.parent if os.environ.get("PYTEST_XDIST_WORKER") else shared  # each worker's base lies in the run's


def shared_once(tmp_path_factory, name, build):
    """The folder `name`, built once for the whole session by `build(folder)`, also under pytest-xdist (which makes a
    session fixture once in every worker): the first worker to ask builds it under a file lock, in `shared_folder`,
    and marks it done last; the others wait for it, then read it."""
    import fcntl

    shared = shared_folder(tmp_path_factory)
    folder, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            build(folder)
            done.touch()
    return folder


def code_blocks(page, language):
    """The text of each ```language block of the Markdown file `page`, in order."""
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)


def run_cli(module, *args, cwd=None, input=None, timeout=600, native_logs=False, env=None):
    """Runs `python -m kmt.cli.<module> args...` in a fresh process, with the variables of `env` added to the
    environment; returns the CompletedProcess.

    TensorFlow's native log lines are off (`TF_CPP_MIN_LOG_LEVEL=3`) unless `native_logs`, which leaves the level
    to kmt (its default, 2, as a user gets it)."""
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"} | (env or {})
    if native_logs:
        del env["TF_CPP_MIN_LOG_LEVEL"]
    return subprocess.run(
        [sys.executable, "-m", f"kmt.cli.{module}", *map(str, args)],
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def refused(capsys, main, *args):
    """A console script's `main(args)` run in the test process, expected to refuse them: `(exit status, the last
    line it wrote to stderr)`. Each script's refusal is also checked once in a process of its own (`run_cli`)."""
    with pytest.raises(SystemExit) as stopped:
        main([str(arg) for arg in args])
    return stopped.value.code, capsys.readouterr().err.strip().splitlines()[-1]


def pixels_of_color(png, color):
    """How many pixels of the image file `png` have the colour `color` ("#rrggbb"), to within rounding."""
    import matplotlib.image
    import numpy as np

    image = matplotlib.image.imread(png)
    rgb = np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    return int((np.abs(image[..., :3] - rgb).max(axis=-1) < 0.02).sum())


def model_inputs(source, target_in):
    """A model's input dict from token-id lists or arrays."""
    import numpy as np

    return {"source": np.asarray(source, "int32"), "target_in": np.asarray(target_in, "int32")}


def model_logits(model, source, target_in):
    """`model`'s inference logits for the batch, as numpy."""
    from keras import ops

    return ops.convert_to_numpy(model(model_inputs(source, target_in), training=False))


def token_batch():
    """`(source, target_in)`: 3 random sentences of ids in [1, 23), the first source padded from position 5."""
    import numpy as np

    rng = np.random.default_rng(0)
    source = rng.integers(1, 23, size=(3, 7))
    source[0, 5:] = 0  # a padded sentence
    target_in = rng.integers(1, 23, size=(3, 6))
    return source, target_in


def optional(module, install):
    """`pytest.importorskip(module)` for an optional dependency, whose skip fails under .ci/run
    (KMT_NO_OPTIONAL_SKIPS=1; tests/conftest.py). `install` says how a user gets it."""
    return pytest.importorskip(module, reason=f"needs {module}, an optional dependency: {install}")


def train_main(monkeypatch, capsys, *args):
    """`kmt-train args...` run in the test process (Hydra's `main`, as the console script calls it): `(exit status,
    stdout, stderr)`. Hydra's logging setup is off (its `dictConfig` would close pytest's capture handlers) and its
    global state is cleared afterwards. The real process is run by the `smoke_run` fixture and the e2e tests."""
    import sys

    from hydra.core.global_hydra import GlobalHydra

    from kmt.cli.train import main

    quiet = ["hydra/job_logging=none", "hydra/hydra_logging=none"]
    monkeypatch.setattr(sys, "argv", ["kmt-train", *map(str, args), *quiet])
    try:
        main()
        status = 0
    except SystemExit as stopped:
        status = stopped.code
    finally:
        GlobalHydra.instance().clear()
    captured = capsys.readouterr()
    return status, captured.out, captured.err
