"""kmt: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as Keras 3 layers, for translation.

`import kmt` is cheap: it imports neither Keras nor TensorFlow (which alone takes seconds), so a command that needs
neither (kmt-plot, kmt-serve until it has opened its port, kmt-translate on a CTranslate2 directory) starts at
once. It sees to two things for whenever they are imported, by this process's own code or by kmt's:

- TensorFlow's native start-up lines are kept out of the output (`kmt._startup`), its device probe included, and
  a Keras backend that is not installed is one line naming what to install (`kmt._missing_backend`);
- kmt's Keras objects (layers, mask functions, loss, metric, schedule) are registered as soon as Keras is, so a
  saved `model.keras` loads with `keras.saving.load_model(path)` (safe mode on) after `import kmt`.

`kmt.Transformer`, `kmt.LSTM`, `kmt.models`, `kmt.layers`, `kmt.losses` and `kmt.schedule` import Keras when first
used.
"""

import importlib
import importlib.abc
import importlib.machinery
import os
import sys

# kmt's TensorFlow log level, unless the user set one, before Keras imports JAX where it is installed: JAX sets 1
# otherwise, and the processes a sweep's launcher starts would inherit that and show TensorFlow's start-up lines.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from kmt._missing_backend import backend_installed  # noqa: E402
from kmt._startup import filtered_startup_logs  # noqa: E402

__version__ = "0.1.0"

_LAZY = {"Transformer": "kmt.models.transformer", "LSTM": "kmt.models.lstm", "models": "kmt.models",
         "layers": "kmt.layers", "losses": "kmt.losses", "schedule": "kmt.schedule"}
# The modules holding Keras serializables.
_REGISTERING = ("kmt.layers", "kmt.losses", "kmt.schedule", "kmt.models.transformer", "kmt.models.lstm")


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'kmt' has no attribute '{name}'")
    module = importlib.import_module(_LAZY[name])
    return module if _LAZY[name] == f"kmt.{name}" else getattr(module, name)


def _started():
    """Once TensorFlow is imported: its devices found (its device probe logs from a thread of its own, so the
    filter stays on until the probe is done); once Keras is: kmt's objects registered."""
    if "tensorflow" in sys.modules:
        sys.modules["tensorflow"].config.list_physical_devices()
    if "keras" in sys.modules:
        for name in _REGISTERING:
            importlib.import_module(name)  # a module part-way through its own import is left to finish it


class _QuietLoader(importlib.abc.Loader):
    """Runs a module's own loader, then `_started()`, with TensorFlow's start-up lines filtered, around the
    outermost of Keras's and TensorFlow's imports (each imports the other)."""

    depth = 0

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # the rest (resource readers, `is_package`, ...) is the module's own loader's
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        if _QuietLoader.depth:
            self.loader.exec_module(module)
            return
        _QuietLoader.depth += 1
        try:
            with filtered_startup_logs(), backend_installed():  # a backend not installed: one line
                self.loader.exec_module(module)
                _started()
        finally:
            _QuietLoader.depth -= 1


class _StartupFinder(importlib.abc.MetaPathFinder):
    """Finds `keras` and `tensorflow` as Python would, behind `_QuietLoader` (asked only until they are imported;
    a `find_spec` that only asks whether one is installed imports nothing)."""

    def find_spec(self, name, path=None, target=None):
        if name not in ("keras", "tensorflow"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


if {"keras", "tensorflow"} - set(sys.modules):
    sys.meta_path.insert(0, _StartupFinder())
if {"keras", "tensorflow"} & set(sys.modules):
    with filtered_startup_logs():
        _started()
