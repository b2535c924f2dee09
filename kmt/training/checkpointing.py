"""Epoch checkpoints: every epoch's weights and the best so far, written atomically (Keras's `ModelCheckpoint`, as a
run directory keeps them)."""

import json
import math

import keras

from kmt.run_dir import Checkpoints, write_atomically


def finite_loss(logs):
    """False when the epoch's training loss is NaN or infinite: such weights are never checkpointed."""
    loss = (logs or {}).get("loss")
    return loss is None or math.isfinite(loss)


def improves(monitor, value, best):
    """True when `value` of `monitor` beats `best` (None: nothing yet): lower is better for losses and perplexity,
    higher for the rest (accuracy, BLEU)."""
    if best is None:
        return True
    return value < best if monitor.endswith(("loss", "ppl")) else value > best


class EpochCheckpoint(keras.callbacks.Callback):
    """Saves `epoch_{NNN}.weights.h5` after every epoch and `best.weights.h5` when `monitor` improves, atomically;
    keeps the newest `keep` epoch files. Epoch numbers continue across resumed runs, so nothing is overwritten. The
    best epoch is recorded in `best.json` (`Checkpoints.best_epoch`), which `EarlyStopping` counts its patience from,
    so put this callback before that one. Epochs whose loss is not finite are not saved.

    Args:
        directory: the run's `checkpoints/`.
        keep: int. How many of the newest epoch files to keep. Defaults to 5.
        monitor: str. The logged metric that picks the best epoch. Defaults to `"val_loss"`.
    """

    def __init__(self, directory, keep=5, monitor="val_loss"):
        super().__init__()
        self.checkpoints = Checkpoints(directory)
        self.keep = keep
        self.monitor = monitor

    def on_epoch_end(self, epoch, logs=None):
        if not finite_loss(logs):
            return
        write_atomically(self.checkpoints.epoch(epoch + 1), self.model.save_weights)
        for stale in self.checkpoints.epochs()[: -self.keep or None]:
            stale.unlink()
        value, best = (logs or {}).get(self.monitor), self.checkpoints.best_epoch(self.monitor)
        if value is not None and improves(self.monitor, value, best and best["value"]):
            write_atomically(self.checkpoints.best, self.model.save_weights)
            best = {"epoch": epoch + 1, "monitor": self.monitor, "value": value}
            write_atomically(self.checkpoints.best_record, json.dumps(best, indent=2) + "\n")
