"""One line naming what to install when the Keras backend a user picked (`KERAS_BACKEND`) is not installed, in
place of the 30-line traceback of Keras's import."""

import contextlib
import os
import sys

# The library each backend imports, by its top-level package, and how to install it (docs/gpu.md).
_INSTALL = {
    "torch": (
        "PyTorch",
        'pip install "kmt[torch]" (for the CPU-only build, first pip install torch from PyTorch\'s '
        "CPU index: docs/gpu.md)",
    ),
    "jax": ("JAX", 'pip install "jax[cpu]", or "kmt[jax-cuda]" for CUDA 12 GPUs (docs/gpu.md)'),
    "tensorflow": (
        "TensorFlow",
        'pip install "kmt" again (TensorFlow is one of its dependencies; "kmt[tf-cuda]" for CUDA 12 GPUs: docs/gpu.md)',
    ),
}
_INSTALL["jaxlib"] = _INSTALL["jax"]


class BackendNotInstalled(ImportError):
    """The library of the chosen Keras backend cannot be imported."""


@contextlib.contextmanager
def backend_installed():
    """Around `import keras`: a backend library that is not installed raises `BackendNotInstalled`, whose message
    says what to install. Left uncaught, as in every kmt command, it prints as one line, `error: <message>`, and the
    process exits with status 1."""
    try:
        yield
    except ModuleNotFoundError as error:
        package = (error.name or "").partition(".")[0]
        if package not in _INSTALL:
            raise
        library, install = _INSTALL[package]
        chosen = os.environ.get("KERAS_BACKEND")
        setting = f"KERAS_BACKEND={chosen}" if chosen else "the Keras backend in ~/.keras/keras.json"
        previous_hook = sys.excepthook

        def one_line(kind, value, traceback):
            if isinstance(value, BackendNotInstalled):
                print(f"error: {value}", file=sys.stderr)
            else:
                previous_hook(kind, value, traceback)

        sys.excepthook = one_line
        raise BackendNotInstalled(
            f"{setting} needs {library}, which is not installed: {install}", name=error.name
        ) from None
