"""Every private Keras API kmt uses, in one place, each with why: they may change in any Keras release, so kmt pins
Keras (`keras~=3.15.1` in pyproject.toml) and `tests/test_keras_private.py` fails on another version until each use
below is checked against it and `TESTED_KERAS` updated.

- `rnn`: the loop `keras.layers.RNN` runs (`keras.src.backend.rnn`), for the LSTM decoder's step function, which
  closes over the encoder states (a Keras 3 cell cannot be given them): a `lax.scan` under JAX, a `tf.while_loop`
  whose `maximum_iterations` lets XLA compile it and its gradient under TensorFlow. `keras.ops.scan` is
  differentiable under both but not XLA-compilable under TensorFlow.
- `disable_tensorflow_import`: the lazy module every Keras file imports as `tf` (`keras.src.utils.module_utils`),
  told TensorFlow is not installed (`kmt.backend.keep_tensorflow_out` says when and why).
- `BackupAndRestore`: Keras's callback with the private parts kmt's resume state builds on given public names (the
  file paths it writes, the epoch it saves, the method that saves).
- `initial_epoch`: the epoch `model.fit` starts from, which `BackupAndRestore` sets on a resume
  (`model._initial_epoch`).
- `EpochIterator`: what `model.fit` reads its batches through under every backend (the tests check kmt's streams
  through it).
"""

import keras
from keras.src.backend import rnn
from keras.src.trainers.epoch_iterator import EpochIterator

TESTED_KERAS = ("3.15.1",)  # the Keras versions each use above was checked against

__all__ = ["TESTED_KERAS", "BackupAndRestore", "EpochIterator", "disable_tensorflow_import", "initial_epoch", "rnn"]


def disable_tensorflow_import():
    """Tells Keras that TensorFlow is not installed, so that it never imports it."""
    from keras.src.utils import module_utils

    module_utils.tensorflow._available = False


def initial_epoch(model: keras.Model) -> int:
    """The epoch `model.fit` starts (or started) from: 0, or the epochs a resume by `BackupAndRestore` restored."""
    return getattr(model, "_initial_epoch", None) or 0


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """`keras.callbacks.BackupAndRestore` whose saving a subclass writes itself, in `save_backup`, to the paths
    Keras restores from (`weights_path`, `metadata_path`), with the epoch to record (`current_epoch`)."""

    @property
    def weights_path(self):
        return self._weights_path

    @property
    def metadata_path(self):
        return self._training_metadata_path

    @property
    def current_epoch(self):
        return self._current_epoch

    def _save_model(self):  # what Keras calls to save
        self.save_backup()

    def save_backup(self):
        """Writes the backup: the model's weights (with the optimizer state) and `{"epoch": current_epoch, ...}`."""
        raise NotImplementedError
