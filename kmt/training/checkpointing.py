"""Epoch and update checkpoints: every epoch's weights, every N updates' (`trainer.save_every_updates`) and the best
so far, written atomically (Keras's `ModelCheckpoint`, as a run directory keeps them)."""

import json
import math

import keras

from kmt.run_dir import Checkpoints, write_atomically


def optimizer_step(model):
    """The number of updates `model`'s optimizer has made, as a Python int, whatever holds it (a `MirroredVariable`
    under `tf.distribute`, an array spread over devices under JAX)."""
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


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


class EveryUpdates(keras.callbacks.Callback):
    """Calls `on_updates(update, logs)` after every `every`-th optimizer update (never when `every` is 0), counting
    from the update a resumed run starts at. A subclass's `epoch` is the epoch in progress (counted from 0).

    Args:
        every: int. The interval, in updates; 0 for never.
        batches_per_update: int. `optim.gradient_accumulation_steps`. Defaults to 1.
    """

    def __init__(self, every, batches_per_update=1):
        super().__init__()
        self.every, self.batches_per_update = every, batches_per_update
        self.batches, self.epoch = None, 0

    def on_train_begin(self, logs=None):
        self.batches = None  # read at the first epoch, once a resume has restored the optimizer

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        if self.batches is None:
            self.batches = optimizer_step(self.model) * self.batches_per_update

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if self.every and self.batches % (self.every * self.batches_per_update) == 0:
            self.on_updates(self.batches // self.batches_per_update, logs)

    def on_updates(self, update, logs):
        raise NotImplementedError


class UpdateCheckpoint(EveryUpdates):
    """Saves `update_{NNNNNNN}.weights.h5` every `every` updates (fairseq's `--save-interval-updates`, OpenNMT's
    `save_checkpoints_steps`), atomically, and keeps the newest `keep`; put it before the resume state, as
    `EpochCheckpoint`. Updates whose loss so far is not finite are not saved.

    Args:
        directory: the run's `checkpoints/`.
        every: int. `trainer.save_every_updates`.
        keep: int. How many of the newest update files to keep. Defaults to 5.
        batches_per_update: int. `optim.gradient_accumulation_steps`. Defaults to 1.
    """

    def __init__(self, directory, every, keep=5, batches_per_update=1):
        super().__init__(every, batches_per_update)
        self.checkpoints = Checkpoints(directory)
        self.keep = keep

    def on_updates(self, update, logs):
        if not finite_loss(logs):
            return
        write_atomically(self.checkpoints.update(update), self.model.save_weights)
        for stale in self.checkpoints.updates()[: -self.keep or None]:
            stale.unlink()
