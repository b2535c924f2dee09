"""TensorFlow's native start-up lines, kept out of kmt's commands' output (`quiet_startup`, which `kmt.cli` turns on).

TensorFlow 2.21 logs through Abseil, and Abseil writes every line logged before `absl::InitializeLog()` to stderr
whatever `TF_CPP_MIN_LOG_LEVEL` says: on a machine without a GPU each process that imports TensorFlow and makes its
first op prints five or six lines ("Could not find cuda drivers", "failed call to cuInit", the CPU-instruction
notice) before any of kmt's own, burying one-line errors and logs under them. `filtered_startup_logs` runs that
start-up with the process's stderr (file descriptor 2, where C++ writes) captured, then writes back every captured
line but those `TF_CPP_MIN_LOG_LEVEL=2` (kmt's default) was meant to hide: TensorFlow's INFO and WARNING lines,
Abseil's notice, the CPU-instruction notice's second line, and the CUDA probe's error, which on a machine without a
GPU driver is no error. Python warnings and every other line, TensorFlow's other errors included, still reach the
user. `TF_CPP_MIN_LOG_LEVEL=0` (or 1) turns the filter off.

The same outermost import also leaves out what TensorFlow and Keras import only for features kmt does not use
(`_deferred`): with the TensorFlow backend, JAX (for TFLite's JAX converter) and SciPy (for TensorFlow's legacy
Keras), and with any backend Matplotlib's pyplot (for Keras's image-gallery plot). Their guarded imports find them
missing; kmt's own later imports (the learning-curve plots) load them as usual. A command starts about 2 s sooner.

That import also runs with Python's cyclic garbage collector paused (`paused_gc`): it creates a few hundred thousand
objects that live as long as the process, and the collector, set off every 700 allocations, went over them about a
thousand times to find a few thousand cyclic ones (about a fifth of `import tensorflow`'s time). They are frozen
afterwards, out of every later collection.

A library user's `import kmt` does none of this: only a command asks for it.
"""

import contextlib
import gc
import importlib.abc
import importlib.machinery
import json
import os
import re
import sys
import tempfile

from kmt._missing_backend import backend_installed

# Abseil's pre-initialization notice, TensorFlow's INFO and WARNING lines (`I0000 <time> <thread> file.cc:N] ...`),
# the CPU-instruction notice's second line, and the CUDA probe's error on a machine without a GPU driver.
_STARTUP_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IW]\d{4} [\d:.]+ +\d+ \S+\.cc:\d+\]"
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags"
    r"|E\d{4} [\d:.]+ +\d+ cuda_platform\.cc:\d+\] failed call to cuInit"
)


@contextlib.contextmanager
def filtered_startup_logs():
    """Captures file descriptor 2 for the block, then writes back the captured lines `_STARTUP_NOISE` does not
    match. Does nothing when `TF_CPP_MIN_LOG_LEVEL` asks for TensorFlow's INFO or WARNING lines, or when there is
    no file descriptor 2."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "").strip() in ("0", "1"):
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines = capture.read().decode("utf-8", errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not _STARTUP_NOISE.match(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


@contextlib.contextmanager
def paused_gc(*, freeze: bool = False):
    """Python's cyclic garbage collector off for the block (back as it was after), for a block that creates many
    objects that outlive it (an import, a SavedModel's load): each collection would go over all of them again, to
    little end. `freeze=True` then moves every object tracked so far out of later collections (`gc.freeze`), for
    blocks whose objects live as long as the process. Reference counting frees the rest as usual."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()


def quiet_startup():
    """For kmt's commands, from their start (`kmt.cli` calls it): `TF_CPP_MIN_LOG_LEVEL=2` unless the user set it
    (before Keras imports JAX, which sets 1 otherwise, for the processes a sweep's launcher starts to inherit), and
    the outermost import of Keras or TensorFlow, whenever it comes, run inside `filtered_startup_logs` with
    TensorFlow's device probe (which logs from a thread of its own) done inside it too. A Keras backend that is not
    installed is then one line naming what to install (`kmt._missing_backend`). Calling it again does nothing."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if any(isinstance(finder, _StartupFinder) for finder in sys.meta_path):
        return
    if {"keras", "tensorflow"} - set(sys.modules):
        sys.meta_path.insert(0, _StartupFinder())
    if {"keras", "tensorflow"} & set(sys.modules):
        with filtered_startup_logs():
            _probe_devices()


def _probe_devices():
    """TensorFlow's devices found, once it is imported, so that its device probe's lines meet the filter."""
    if "tensorflow" in sys.modules:
        sys.modules["tensorflow"].config.list_physical_devices()


class _QuietLoader(importlib.abc.Loader):
    """Runs a module's own loader, then `_probe_devices()`, with TensorFlow's start-up lines filtered, around the
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
        deferred = _Deferred(_deferred())
        sys.meta_path.insert(0, deferred)
        try:
            # a backend not installed: one line (`backend_installed`)
            with filtered_startup_logs(), backend_installed(), paused_gc(freeze=True):
                self.loader.exec_module(module)
                _probe_devices()
        finally:
            sys.meta_path.remove(deferred)
            _QuietLoader.depth -= 1


def _keras_backend():
    """The backend Keras will load, as Keras reads it: `KERAS_BACKEND`, else `keras.json` in `KERAS_HOME` (or
    `~/.keras`), else tensorflow."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json"), encoding="utf-8") as f:
            return json.load(f).get("backend", "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def _deferred():
    """The top-level packages kept out of the outermost Keras or TensorFlow import (the module's docstring)."""
    if _keras_backend() == "tensorflow":
        return frozenset({"jax", "jaxlib", "scipy", "matplotlib"})  # JAX itself imports SciPy
    return frozenset({"matplotlib"})


class _Deferred(importlib.abc.MetaPathFinder):
    """Makes importing any of `packages` (not yet imported) raise ImportError, while Keras and TensorFlow import
    themselves: each of those imports is guarded (`try: import jax ... except ImportError`), and unused by kmt."""

    def __init__(self, packages):
        self.packages = packages

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.packages:
            raise ImportError(f"{name} is imported later, if kmt needs it", name=name)
        return None


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
