"""Training callbacks: atomic checkpoints, resumable backups, learning rate and throughput in the logs."""

import csv
import io
import json
import math
import logging
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import keras

from kmt.model import residual_dropouts, set_residual_dropout
from kmt.run_dir import Checkpoints, append_durably, write_atomically

logger = logging.getLogger(__name__)


def finite_loss(logs):
    """False when the epoch's training loss is NaN or infinite: such weights are never checkpointed."""
    loss = (logs or {}).get("loss")
    return loss is None or math.isfinite(loss)


def seed_states(model):
    """The model's random-state variables (a `SeedGenerator` each, in every Dropout layer), in a fixed order. Keras's
    weights files leave them out, so a resumed run would draw its first epochs' dropout masks again."""
    return [variable for variable in model.variables if variable.name == "seed_generator_state"]


class AtomicBackupAndRestore(keras.callbacks.BackupAndRestore):
    """Keras's `BackupAndRestore` (model weights, optimizer state and epoch, restored when `fit` starts again)
    with every file written atomically, and the backup kept after training so a later run on the same run dir
    with more epochs continues instead of starting over. It also keeps the dropout layers' random state
    (`seed_states`), so a resumed run draws the masks the uninterrupted run would have drawn."""

    def __init__(self, backup_dir, batches_per_update=1):
        super().__init__(backup_dir, save_freq="epoch", delete_checkpoint=False)
        self.batches_per_update = batches_per_update  # optim.gradient_accumulation_steps, recorded with the state

    def on_epoch_end(self, epoch, logs=None):
        if finite_loss(logs):
            super().on_epoch_end(epoch, logs)

    def _save_model(self):
        write_atomically(self._weights_path, self.model.save_weights)
        write_atomically(self._training_metadata_path, json.dumps({
            "epoch": self._current_epoch, "batch": 0, "batches_per_update": self.batches_per_update,
            "seed_states": [keras.ops.convert_to_numpy(v).tolist() for v in seed_states(self.model)],
        }, indent=2) + "\n")

    def on_train_begin(self, logs=None):
        from kmt.errors import KmtError

        resume_state = Checkpoints(Path(self.backup_dir).parent).resume_state()  # one line if it does not read
        saved = resume_state.get("batches_per_update", 1) if resume_state else None
        if saved is not None and saved != self.batches_per_update:
            # The optimizer counts batches; the schedule's update is batches // this, so it must not change.
            raise KmtError(
                f"the resume state in {self.backup_dir} was trained with optim.gradient_accumulation_steps={saved}, "
                f"not {self.batches_per_update}; resume with the same value or use a new hydra.run.dir"
            )
        try:
            super().on_train_begin(logs)
        except ValueError as error:  # weights of another shape: the model config changed since the backup
            raise KmtError(
                f"the resume state in {self.backup_dir} does not fit this model ({str(error).splitlines()[0]}); "
                "resume with the run's original model.* settings or use a new hydra.run.dir"
            ) from None
        epoch = self.model._initial_epoch
        if epoch:
            step = int(self.model.optimizer.iterations.numpy())
            if not step:  # Keras skips optimizer variables it cannot match, with a warning only
                raise KmtError(
                    f"the optimizer state in {self.backup_dir} did not load into this optimizer, so the learning rate "
                    "would restart; resume with the run's original optim.* settings or use a new hydra.run.dir"
                )
            logger.info("resuming after epoch %d at optimizer step %d", epoch, step)
            states, variables = resume_state.get("seed_states"), seed_states(self.model)
            if states is not None and len(states) == len(variables):
                for variable, state in zip(variables, states):
                    variable.assign(keras.ops.convert_to_tensor(state, dtype=variable.dtype))
            else:  # a backup from before kmt kept them, or a model with other dropout layers (model.*_word_dropout)
                logger.warning("the resume state holds no random state for these dropout layers: their masks start "
                               "afresh")


def improves(monitor, value, best):
    """True when `value` of `monitor` beats `best` (None: nothing yet): lower is better for losses and perplexity,
    higher for the rest (accuracy, BLEU)."""
    if best is None:
        return True
    return value < best if monitor.endswith(("loss", "ppl")) else value > best


def _epochs(count):
    return f"{count} epoch" + ("" if count == 1 else "s")


class StoppedEarly(Exception):
    """Raised when a resumed run has already used up its patience or its time budget, so `fit` trains nothing more."""


class EpochCheckpoint(keras.callbacks.Callback):
    """Saves `epoch_{NNN}.weights.h5` after every epoch and `best.weights.h5` when `monitor` improves, atomically;
    keeps the newest `keep` epoch files. Epoch numbers continue across resumed runs, so nothing is overwritten.

    With `patience`, training stops once that many epochs have passed without a better `monitor` (fairseq's
    `--patience`, OpenNMT-tf's `early_stopping`). The best epoch is kept in `best.json`, so the count survives a
    resume: a resumed run whose patience is already spent raises `StoppedEarly` before training a batch.
    """

    def __init__(self, directory, keep=5, monitor="val_loss", patience=0):
        super().__init__()
        self.checkpoints = Checkpoints(directory)
        self.keep = keep
        self.monitor = monitor
        self.patience = patience

    def best(self):
        return self.checkpoints.best_epoch(self.monitor)

    def _patience_spent(self, epochs_done):
        """The best epoch's record when `patience` epochs have passed since it, else None."""
        best = self.best()
        return best if self.patience and best and epochs_done - best["epoch"] >= self.patience else None

    def on_train_begin(self, logs=None):
        epochs_done = getattr(self.model, "_initial_epoch", None) or 0  # set by a resume (BackupAndRestore)
        best = self._patience_spent(epochs_done)
        if best:
            raise StoppedEarly(
                f"{self.monitor} has not improved for {_epochs(epochs_done - best['epoch'])} (best {best['value']:.4g} "
                f"at epoch {best['epoch']}; trainer.patience={self.patience}): nothing more to train"
            )

    def on_epoch_end(self, epoch, logs=None):
        if not finite_loss(logs):
            return
        write_atomically(self.checkpoints.epoch(epoch + 1), self.model.save_weights)
        for stale in self.checkpoints.epochs()[: -self.keep or None]:
            stale.unlink()
        value, best = (logs or {}).get(self.monitor), self.best()
        if value is not None and improves(self.monitor, value, best and best["value"]):
            write_atomically(self.checkpoints.best, self.model.save_weights)
            best = {"epoch": epoch + 1, "monitor": self.monitor, "value": value}
            write_atomically(self.checkpoints.best_record, json.dumps(best, indent=2) + "\n")
        best = self._patience_spent(epoch + 1)
        if best:
            logger.info(
                "early stopping after epoch %d: %s has not improved for %s (best %.4g at epoch %d)",
                epoch + 1, self.monitor, _epochs(epoch + 1 - best["epoch"]), best["value"], best["epoch"],
            )
            self.model.stop_training = True


class ValidationBLEU(keras.callbacks.Callback):
    """Adds `val_bleu` to each epoch's logs: sacreBLEU of `translate(sources)` against `references` (fairseq's
    `--eval-bleu`), for the progress bar, history.csv, TensorBoard and `EpochCheckpoint(monitor="val_bleu")`, so put
    it before those. Epochs whose loss is not finite are skipped.

    Args:
        translate: `translate(list of str) -> (translations, scores)` with the weights of `decoder`.
        sources, references: lists of str, the validation split.
        decoder: the model `translate` runs, when it is not the trained one (a float32 copy of a mixed-precision
            model): it takes the trained weights before each decode. Defaults to `None` (the trained model).
        tokenized: bool. The text is already tokenized, so BLEU splits on spaces only. Defaults to `False`.
    """

    def __init__(self, translate, sources, references, decoder=None, tokenized=False):
        super().__init__()
        self.translate = translate
        self.sources, self.references = sources, references
        self.decoder = decoder
        self.tokenized = tokenized

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or not finite_loss(logs):
            return
        from kmt.metrics import sacre_scores

        started = time.perf_counter()
        if self.decoder is not None and self.decoder is not self.model:
            self.decoder.set_weights(self.model.get_weights())
        translations, _ = self.translate(self.sources)
        logs["val_bleu"] = sacre_scores(translations, self.references, self.tokenized)["bleu"]
        logger.info("epoch %d: val_bleu %.2f (%d sentences translated in %.1f s)", epoch + 1, logs["val_bleu"],
                    len(self.sources), time.perf_counter() - started)


class TrainingStats(keras.callbacks.Callback):
    """Adds `learning_rate` and `tokens_per_second` (target tokens per second of training) to each epoch's logs,
    before the CSV, TensorBoard and progress callbacks read them (so put it first in the list)."""

    def __init__(self, tokens_per_epoch):
        super().__init__()
        self.tokens_per_epoch = tokens_per_epoch
        self.epoch_seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start, self._train_seconds = time.perf_counter(), None

    def on_test_begin(self, logs=None):
        if self._train_seconds is None:  # validation inside fit: the training part of the epoch is over
            self._train_seconds = time.perf_counter() - self._start

    def on_epoch_end(self, epoch, logs=None):
        seconds = self._train_seconds or time.perf_counter() - self._start
        self.epoch_seconds.append(seconds)
        if logs is not None:
            logs["learning_rate"] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
            logs["tokens_per_second"] = self.tokens_per_epoch / seconds
            logs["epoch_seconds"] = time.perf_counter() - self._start  # training and validation


class LateDropout(keras.callbacks.Callback):
    """Sets the residual and embedding dropout (`model.dropout`) to `rate` for the epochs after the first `after`
    ("late dropout", Liu et al., 2023, "Dropout Reduces Underfitting"): a run learns fast with little dropout, then
    regularizes once it starts to overfit. A resumed run past `after` gets `rate` from its first epoch.

    A dropout rate is a constant of the traced train step, so the step is traced again once, when the rate changes.
    """

    def __init__(self, rate, after):
        super().__init__()
        self.rate, self.after = rate, after

    def on_epoch_begin(self, epoch, logs=None):
        if epoch < self.after:
            return
        before = residual_dropouts(self.model)[0].rate  # they are built at one rate and only ever set together
        if before == self.rate:
            return
        count = set_residual_dropout(self.model, self.rate)
        self.model.make_train_function(force=True)
        logger.info("late dropout: residual and embedding dropout %g -> %g from epoch %d (%d layers)", before,
                    self.rate, epoch + 1, count)


class TimeBudget(keras.callbacks.Callback):
    """Stops training after the epoch past which one more epoch would overrun `max_seconds` (fairseq's
    `--stop-time-hours`), so a run fits a wall-clock budget whatever the machine.

    Time counts whole epochs (training and validation, `epoch_seconds` in history.csv), including those of earlier
    invocations of a resumed run, read from the rows of `history_path` that the resume state covers. The next
    epoch is predicted to take as long as the mean epoch so far.
    """

    def __init__(self, max_seconds, history_path):
        super().__init__()
        self.max_seconds = max_seconds
        self.history_path = Path(history_path)
        self._durations = []

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
        epochs_done = getattr(self.model, "_initial_epoch", None) or 0  # set by a resume (BackupAndRestore)
        self._durations = durations = self._earlier(epochs_done)
        if self._spent(durations):
            raise StoppedEarly(
                f"time budget spent: {_epochs(len(durations))} took {sum(durations) / 60:.1f} of "
                f"trainer.max_minutes={self.max_seconds / 60:g}, and one more would overrun it: nothing more to train"
            )

    def on_epoch_end(self, epoch, logs=None):
        self._durations.append((logs or {}).get("epoch_seconds", 0.0))
        if self._spent(self._durations):
            logger.info(
                "time budget: stopping after epoch %d, %.1f of %.1f minutes spent", epoch + 1,
                sum(self._durations) / 60, self.max_seconds / 60,
            )
            self.model.stop_training = True


class HistoryCSV(keras.callbacks.Callback):
    """`history.csv`, one row per epoch (`epoch` counted from 0, then the logs' keys, as keras.callbacks.CSVLogger
    writes them), that stays consistent with the resume state whatever moment a run is killed: each row is
    appended and flushed at the end of its epoch, and when a resumed `fit` starts at epoch k, rows of epochs >= k
    (written before a kill but not covered by the backup) are dropped first, so epochs are never duplicated. A key
    the file has no column for (a resume that logs more) adds one, blank in the earlier rows."""

    def __init__(self, path):
        super().__init__()
        self.path = Path(path)
        self._first_epoch = True

    def on_train_begin(self, logs=None):
        self._first_epoch = True

    def on_epoch_begin(self, epoch, logs=None):
        if self._first_epoch and self.path.exists():
            with open(self.path, newline="", encoding="utf-8") as f:
                rows = list(csv.reader(f))
            kept = rows[:1] + [row for row in rows[1:] if row and int(row[0]) < epoch]
            if len(kept) < len(rows):
                self._replace(kept)
        self._first_epoch = False

    def _replace(self, rows):
        """Rewrites the file as `rows`, atomically: a kill leaves the old file or the new one."""
        write_atomically(self.path, _csv_text(rows))

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        keys = sorted(logs)
        new = not self.path.exists() or self.path.stat().st_size == 0
        if not new:
            with open(self.path, newline="", encoding="utf-8") as f:
                rows = list(csv.reader(f))
            columns = rows[0][1:]
            added = [key for key in keys if key not in columns]
            keys = columns + added
            if added:
                # A resumed run that logs more than its first epochs did (`trainer.val_bleu=true` added, a metric new
                # since the run started): the header gains the columns, the earlier rows stay, blank in them.
                self._replace([["epoch", *keys], *(row + [""] * len(added) for row in rows[1:])])
        row = [epoch, *(logs.get(key, "") for key in keys)]
        if new:
            write_atomically(self.path, _csv_text([["epoch", *keys], row]))
        else:
            append_durably(self.path, _csv_text([row]))


def _csv_text(rows):
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    return text.getvalue()


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
