"""kmt: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as Keras 3 layers, for translation.

Importing kmt registers its Keras objects (layers, mask functions, loss, metric, schedule), so a saved
`model.keras` loads with `keras.saving.load_model(path)` (safe mode on) after `import kmt`.
"""

import os
import sys

# kmt's TensorFlow log level, unless the user set one, before Keras imports JAX where it is installed: JAX sets 1
# otherwise, and the processes a sweep's launcher starts would inherit that and show TensorFlow's start-up lines.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from kmt._missing_backend import backend_installed  # noqa: E402
from kmt._startup import filtered_startup_logs  # noqa: E402

# Importing TensorFlow and finding its devices logs lines no user needs; a backend that is not installed is one line.
with filtered_startup_logs(), backend_installed():
    import keras

    if "tensorflow" in sys.modules:
        sys.modules["tensorflow"].config.list_physical_devices()

from kmt import layers, losses, schedule  # noqa: E402, F401  (registers the Keras serializables)
from kmt.lstm import build_lstm  # noqa: E402, F401
from kmt.model import build_transformer  # noqa: E402, F401

__version__ = "0.1.0"
