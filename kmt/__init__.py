"""kmt: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as Keras 3 layers, for translation.

Importing kmt registers its Keras objects (layers, mask functions, loss, metric, schedule), so a saved
`model.keras` loads with `keras.saving.load_model(path)` (safe mode on) after `import kmt`.
"""

import sys

from kmt._missing_backend import backend_installed
from kmt._startup import filtered_startup_logs

# Importing TensorFlow and finding its devices logs lines no user needs; a backend that is not installed is one line.
with filtered_startup_logs(), backend_installed():
    import keras

    if "tensorflow" in sys.modules:
        sys.modules["tensorflow"].config.list_physical_devices()

from kmt import layers, losses, schedule  # noqa: E402, F401  (registers the Keras serializables)
from kmt.lstm import build_lstm  # noqa: E402, F401
from kmt.model import build_transformer  # noqa: E402, F401

__version__ = "0.1.0"
