"""Run control: when training stops (early stopping, a time budget, a stop signal) and late dropout."""

import csv
import logging
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import keras

from kmt._keras_private import initial_epoch
from kmt.run_dir import Checkpoints
from kmt.training.checkpointing import improves, optimizer_step

logger = logging.getLogger(__name__)


class StoppedEarly(Exception):
    """Raised when a resumed run has already used up its patience or its time budget, so `fit` trains nothing more."""


def read_rows(path):
    """The rows of a CSV log (`logs/validations.csv`) as dicts; none when there is no file."""
    if not Path(path).exists():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _epochs(count):
    return f"{count} epoch" + ("" if count == 1 else "s")


class EarlyStopping(keras.callbacks.Callback):
    """Stops training once `patience` epochs have passed without a better `monitor` (fairseq's `--patience`,
    OpenNMT-tf's `early_stopping`). The best epoch is the one `EpochCheckpoint` records in `best.json`, so put this
    callback after that one; the count survives a resume: a resumed run whose patience is already spent raises
    `StoppedEarly` before training a batch.

    Args:
        directory: the run's `checkpoints/`, where `best.json` is.
        monitor: str. The logged metric that must improve. Defaults to `"val_loss"`.
        patience: int. Epochs without improvement before training stops. Defaults to 1.
        validation: an `UpdateValidation` or None. Given (`trainer.validate_every_updates`), patience counts its
            validations, not epochs, and training stops at the update whose validation spends it. Defaults to
            `None`.
    """

    def __init__(self, directory, monitor="val_loss", patience=1, validation=None):
        super().__init__()
        self.checkpoints = Checkpoints(directory)
        self.monitor = monitor
        self.patience = patience
        self.validation = validation
        self._seen = None

    def on_train_batch_end(self, batch, logs=None):
        # With an `UpdateValidation` (trainer.validate_every_updates), patience counts its validations instead: the
        # rows of logs/validations.csv since the best one. Put this callback after it and after the resume state.
        if self.validation is None or self.validation.last is None or self.validation.last is self._seen:
            return
        self._seen = self.validation.last
        rows = [row for row in read_rows(self.validation.path) if row.get(self.monitor)]
        values = [float(row[self.monitor]) for row in rows]
        best = 0
        for index in range(1, len(values)):
            if improves(self.monitor, values[index], values[best]):
                best = index
        if len(values) - 1 - best >= self.patience:
            self.model.stop_training = True  # under JAX, reading `model` brings the train step's state back first
            raise StoppedEarly(
                f"early stopping at update {rows[-1]['update']}: {self.monitor} has not improved for "
                f"{len(values) - 1 - best} validations (best {values[best]:.4g} at update {rows[best]['update']}; "
                f"trainer.patience={self.patience})"
            )

    def _patience_spent(self, epochs_done):
        """The best epoch's record when `patience` epochs have passed since it, else None."""
        best = self.checkpoints.best_epoch(self.monitor)
        return best if best and epochs_done - best["epoch"] >= self.patience else None

    def on_train_begin(self, logs=None):
        self._seen = None
        if self.validation is not None:
            return
        epochs_done = initial_epoch(self.model)  # set by a resume (BackupAndRestore)
        best = self._patience_spent(epochs_done)
        if best:
            raise StoppedEarly(
                f"{self.monitor} has not improved for {_epochs(epochs_done - best['epoch'])} (best {best['value']:.4g} "
                f"at epoch {best['epoch']}; trainer.patience={self.patience}): nothing more to train"
            )

    def on_epoch_end(self, epoch, logs=None):
        if self.validation is not None:
            return
        best = self._patience_spent(epoch + 1)
        if best:
            logger.info(
                "early stopping after epoch %d: %s has not improved for %s (best %.4g at epoch %d)",
                epoch + 1,
                self.monitor,
                _epochs(epoch + 1 - best["epoch"]),
                best["value"],
                best["epoch"],
            )
            self.model.stop_training = True


class TimeBudget(keras.callbacks.Callback):
    """Stops training after the epoch past which one more epoch would overrun `max_seconds` (fairseq's
    `--stop-time-hours`), so a run fits a wall-clock budget whatever the machine.

    Time counts whole epochs (training and validation, `epoch_seconds` in history.csv), including those of earlier
    invocations of a resumed run, read from the rows of `history_path` that the resume state covers. The next
    epoch is predicted to take as long as the mean epoch so far. With `every_updates` (the interval of update
    checkpoints or validations) the budget is also checked every so many updates, and a run stops between them
    (after the resume state saved there).
    """

    def __init__(self, max_seconds, history_path, every_updates=0, batches_per_update=1):
        super().__init__()
        self.max_seconds = max_seconds
        self.history_path = Path(history_path)
        self.every = every_updates * batches_per_update  # in batches
        self._durations = []
        self._started, self._batches = time.perf_counter(), 0

    def on_train_batch_end(self, batch, logs=None):
        # Checked every `every_updates` too (trainer.save_every_updates, trainer.validate_every_updates): an
        # epoch can be hours. One more interval is predicted to take as long as their mean in this invocation.
        self._batches += 1
        if not self.every or self._batches % self.every:
            return
        elapsed = time.perf_counter() - self._started
        spent = sum(self._durations) + elapsed
        if spent + elapsed / (self._batches // self.every) > self.max_seconds:
            self.model.stop_training = True  # under JAX, reading `model` brings the train step's state back first
            raise StoppedEarly(
                f"time budget: stopping within epoch {len(self._durations) + 1}, {spent / 60:.1f} of "
                f"trainer.max_minutes={self.max_seconds / 60:g} spent, and one more interval would overrun it"
            )

    def _earlier(self, epoch):
        """`epoch_seconds` of the epochs before `epoch`, from the history rows."""
        durations = []
        if self.history_path.exists():
            with open(self.history_path, newline="", encoding="utf-8") as f:
                for row in csv.DictReader(f):
                    if int(row["epoch"]) < epoch and row.get("epoch_seconds"):
                        durations.append(float(row["epoch_seconds"]))
        return durations

    def _spent(self, durations):
        """True when one more epoch (as long as their mean) after `durations` would overrun the budget."""
        spent = sum(durations)
        return bool(durations) and spent + spent / len(durations) > self.max_seconds

    def on_train_begin(self, logs=None):
        # Count what earlier invocations spent; a resumed run that the budget had stopped (say, killed while it
        # scored and exported) trains no more.
        epochs_done = initial_epoch(self.model)  # set by a resume (BackupAndRestore)
        self._durations = durations = self._earlier(epochs_done)
        self._started, self._batches = time.perf_counter(), 0
        if self._spent(durations):
            raise StoppedEarly(
                f"time budget spent: {_epochs(len(durations))} took {sum(durations) / 60:.1f} of "
                f"trainer.max_minutes={self.max_seconds / 60:g}, and one more would overrun it: nothing more to train"
            )

    def on_epoch_end(self, epoch, logs=None):
        self._durations.append((logs or {}).get("epoch_seconds", 0.0))
        self._started = time.perf_counter()
        if self._spent(self._durations):
            logger.info(
                "time budget: stopping after epoch %d, %.1f of %.1f minutes spent",
                epoch + 1,
                sum(self._durations) / 60,
                self.max_seconds / 60,
            )
            self.model.stop_training = True


class UpdateLimit(keras.callbacks.Callback):
    """Stops training once the optimizer has made `max_updates` updates (`trainer.max_updates`, fairseq's
    `--max-update`), within an epoch. A resumed run that has made them already trains nothing more. Put it after the
    resume state, which it reads the update count of."""

    def __init__(self, max_updates, batches_per_update=1):
        super().__init__()
        self.max_updates, self.batches_per_update = max_updates, batches_per_update
        self._batches_left = 0

    def on_train_begin(self, logs=None):
        updates = optimizer_step(self.model)  # after a resume: the resume state's, at an update's end
        if updates >= self.max_updates:
            raise StoppedEarly(
                f"trainer.max_updates={self.max_updates} reached ({updates} updates): nothing more to train"
            )
        self._batches_left = (self.max_updates - updates) * self.batches_per_update

    def on_train_batch_end(self, batch, logs=None):
        self._batches_left -= 1  # counted here: reading the optimizer's count would wait for the device
        if not self._batches_left:
            self.model.stop_training = True  # under JAX, reading `model` brings the train step's state back first
            raise StoppedEarly(f"stopping at update {self.max_updates:,}: trainer.max_updates reached")


class LateDropout(keras.callbacks.Callback):
    """Sets the residual and embedding dropout (`model.dropout`) to `rate` for the epochs after the first `after`
    ("late dropout", Liu et al., 2023, "Dropout Reduces Underfitting"): a run learns fast with little dropout, then
    regularizes once it starts to overfit. With `after_updates` (`model.late_dropout_after_updates`), after that
    many updates instead, within an epoch. A resumed run past the switch gets `rate` from its first batch.

    A dropout rate is a constant of the traced train step, so the step is traced again once, when the rate changes.
    """

    def __init__(self, rate, after, after_updates=0, batches_per_update=1):
        super().__init__()
        self.rate, self.after = rate, after
        self.after_updates, self.batches_per_update = after_updates, batches_per_update
        self._batches = None

    def on_train_begin(self, logs=None):
        self._batches = None  # read at the first epoch, once a resume has restored the optimizer

    def on_epoch_begin(self, epoch, logs=None):
        if not self.after_updates:
            if epoch >= self.after:
                self._switch(f"epoch {epoch + 1}")
        elif self._batches is None:
            updates = optimizer_step(self.model)
            self._batches = updates * self.batches_per_update
            if updates >= self.after_updates:
                self._switch(f"update {updates + 1}")

    def on_train_batch_end(self, batch, logs=None):
        if self.after_updates:
            self._batches += 1
            if self._batches == self.after_updates * self.batches_per_update:
                self._switch(f"update {self.after_updates + 1}")

    def _switch(self, when):
        before = self.model.residual_dropouts()[0].rate  # they are built at one rate and only ever set together
        if before == self.rate:
            return
        count = self.model.set_residual_dropout(self.rate)
        self.model.make_train_function(force=True)
        logger.info(
            "late dropout: residual and embedding dropout %g -> %g from %s (%d layers)", before, self.rate, when, count
        )


class DeferredInterrupt(keras.callbacks.Callback):
    """A stop signal during `fit` (Ctrl-C, `kill`, a closed terminal), delivered at the next batch or epoch end
    instead of wherever Python happens to be.

    Python raises `KeyboardInterrupt` at whatever line runs when SIGINT arrives, and a few library code paths (bare
    `except:` clauses in Keras's structure handling, run when a new batch shape is traced) would catch it and carry
    on, so the interrupt could be lost; SIGTERM and SIGHUP, at their defaults, end the process at once, with nothing
    saved. Inside `installed()` the first of these signals only records itself in `received`, and this callback
    raises `KeyboardInterrupt` from its own hooks, where nothing catches it but kmt, which then saves the weights of
    the moment. So a job scheduler's SIGTERM (Slurm, Kubernetes) stops training as Ctrl-C does. A second signal
    interrupts at once.

    Example:
    >>> interrupt = DeferredInterrupt()
    >>> with interrupt.installed():
    ...     signal.raise_signal(signal.SIGTERM)
    ...     interrupt.received
    <Signals.SIGTERM: 15>
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        super().__init__()
        self.received = None  # the first stop signal that arrived, a `signal.Signals`

    @contextmanager
    def installed(self):
        """Routes the stop signals to this callback for the block. Nothing changes outside the main thread, and a
        signal that is ignored (SIGINT in a background job of a non-interactive shell, SIGHUP under `nohup`) stays
        ignored."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {signum: signal.getsignal(signum) for signum in self.SIGNALS}
        for signum, handler in previous.items():
            if handler is not signal.SIG_IGN:
                signal.signal(signum, self._on_signal)
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)  # None: set outside Python

    def _on_signal(self, signum, frame):
        if self.received:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum)

    def _raise_if_requested(self, *args, **kwargs):
        if self.received:
            raise KeyboardInterrupt

    on_train_batch_end = on_test_batch_end = on_epoch_end = _raise_if_requested
