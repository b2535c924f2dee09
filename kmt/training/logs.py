"""What each epoch logs: the learning rate and throughput, validation BLEU, and `history.csv`, one row per epoch that
stays consistent with the resume state."""

import csv
import io
import logging
import time
from pathlib import Path

import keras

from kmt.run_dir import append_durably, write_atomically
from kmt.training.checkpointing import EveryUpdates, finite_loss

logger = logging.getLogger(__name__)


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


class ValidationBLEU(keras.callbacks.Callback):
    """Adds `val_bleu` to each epoch's logs: sacreBLEU of `translate(sources)` against `references` (fairseq's
    `--eval-bleu`), for the progress bar, history.csv, TensorBoard and `EpochCheckpoint(monitor="val_bleu")`, so put
    it before those. Epochs whose loss is not finite are skipped.

    Args:
        translate: `translate(list of str) -> list of str` with the weights of `decoder` (a `Translator`'s).
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
        logs["val_bleu"] = self.score(f"epoch {epoch + 1}")

    def score(self, when):
        """The val split's BLEU with the weights of the moment, logged as `when` ("epoch 3", "update 4000")."""
        from kmt.metrics import sacre_scores

        started = time.perf_counter()
        if self.decoder is not None and self.decoder is not self.model:
            self.decoder.set_weights(self.model.get_weights())
        translations = self.translate(self.sources)
        bleu = sacre_scores(translations, self.references, self.tokenized)["bleu"]
        logger.info(
            "%s: val_bleu %.2f (%d sentences translated in %.1f s)",
            when,
            bleu,
            len(self.sources),
            time.perf_counter() - started,
        )
        return bleu


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
            rows = self._rows()
            kept = rows[:1] + [row for row in rows[1:] if row and int(row[0]) < epoch]
            if len(kept) < len(rows):
                self._replace(kept)
        self._first_epoch = False

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        keys = sorted(logs)
        new = not self.path.exists() or self.path.stat().st_size == 0
        if not new:
            rows = self._rows()
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

    def _rows(self):
        with open(self.path, newline="", encoding="utf-8") as f:
            return list(csv.reader(f))

    def _replace(self, rows):
        """Rewrites the file as `rows`, atomically: a kill leaves the old file or the new one."""
        write_atomically(self.path, _csv_text(rows))


def _csv_text(rows):
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    return text.getvalue()


class UpdateValidation(EveryUpdates):
    """Validates every `every` updates (fairseq's `--validate-interval-updates`, Marian's `--valid-freq`): the val
    loss and metrics, and `val_bleu` when given a `ValidationBLEU`, logged and appended to `path`
    (`logs/validations.csv`: `update`, `epoch` counted from 0, then the scores). The epoch's running training
    metrics are kept across it. A resumed run drops the rows after the update it resumes at. `last` holds the
    latest row.

    Args:
        data: the val split's batches (`Prepared.val_data`).
        path: `logs/validations.csv`.
        every: int. `trainer.validate_every_updates`.
        batches_per_update: int. `optim.gradient_accumulation_steps`. Defaults to 1.
        val_bleu: a `ValidationBLEU` or None. Defaults to `None`.
    """

    def __init__(self, data, path, every, batches_per_update=1, val_bleu=None):
        super().__init__(every, batches_per_update)
        self.data, self.path, self.val_bleu = data, Path(path), val_bleu
        self.last = None

    def on_epoch_begin(self, epoch, logs=None):
        first = self.batches is None
        super().on_epoch_begin(epoch, logs)
        if first and self.path.exists():
            rows = list(csv.reader(io.StringIO(self.path.read_text(encoding="utf-8"))))
            kept = rows[:1] + [row for row in rows[1:] if row and int(row[0]) * self.batches_per_update <= self.batches]
            if len(kept) < len(rows):
                write_atomically(self.path, _csv_text(kept))

    def on_updates(self, update, logs):
        model = self.model
        running = [keras.ops.convert_to_numpy(v) for v in model.metrics_variables]  # evaluate resets them
        scores = model.evaluate(self.data, verbose=0, return_dict=True)
        for variable, value in zip(model.metrics_variables, running):
            variable.assign(value)
        row = {"update": update, "epoch": self.epoch} | {f"val_{k}": float(v) for k, v in scores.items()}
        if self.val_bleu is not None:
            row["val_bleu"] = self.val_bleu.score(f"update {update}")
        logger.info("update %d: %s", update, ", ".join(f"{k} {v:.4g}" for k, v in row.items() if k.startswith("val_")))
        if self.path.exists() and self.path.stat().st_size:
            columns = next(csv.reader(io.StringIO(self.path.read_text(encoding="utf-8"))))
            append_durably(self.path, _csv_text([[row.get(key, "") for key in columns]]))
        else:
            write_atomically(self.path, _csv_text([list(row), list(row.values())]))
        self.last = row
