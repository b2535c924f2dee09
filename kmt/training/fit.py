"""Training, step 2: `model.fit` with the run's callbacks, stop signals acted on between batches, the learning curves
drawn, and a run whose loss diverged stopped before anything is saved from it."""

import logging
import math
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
from omegaconf import OmegaConf

from kmt.errors import KmtError
from kmt.inference.keras_translator import KerasTranslator
from kmt.inference.settings import SearchSettings
from kmt.plots import curves_title, plot_curves, read_history
from kmt.run_dir import write_atomically
from kmt.training.checkpointing import EpochCheckpoint, UpdateCheckpoint
from kmt.training.control import DeferredInterrupt, EarlyStopping, LateDropout, StoppedEarly, TimeBudget, UpdateLimit
from kmt.training.logs import HistoryCSV, TrainingStats, UpdateValidation, ValidationBLEU
from kmt.training.resume import AtomicBackupAndRestore, optimizer_step

logger = logging.getLogger(__name__)


@dataclass
class Fitted:
    """What `model.fit` left for `finish`."""

    history: Any  # keras's History, or None when a resumed run had nothing left to train
    stats: TrainingStats
    wall_seconds: float  # this invocation's model.fit
    run_seconds: float  # the whole run's epochs, earlier invocations of a resumed run included


def fit(cfg, prepared):
    """Trains `prepared.model` for the rest of `trainer.epochs`. Ctrl-C, SIGTERM or SIGHUP save the weights of the
    moment and raise `Interrupted`; a resumed run with no patience or time left trains nothing and goes on."""
    p = prepared
    val_bleu = None
    if cfg.trainer.val_bleu:
        val_bleu = validation_bleu(cfg.decode, p.decoder, p.vocabularies, p.texts["val"], tokenized=cfg.data.tokenized)
    callbacks, stats = build_callbacks(
        cfg.trainer,
        cfg.optim,
        cfg.model,
        p.run,
        p.epoch.target_tokens,
        OmegaConf.to_yaml(cfg, resolve=True),
        val_bleu,
        chief=p.placement.chief,
        steps_per_epoch=p.steps_per_epoch,
        val_data=p.val_data,
    )
    interrupt = DeferredInterrupt()  # last: an epoch's backup is written before Ctrl-C is acted on
    started, history = time.perf_counter(), None
    fit_epochs = lambda data, epochs, steps: p.model.fit(  # noqa: E731
        data,
        validation_data=p.val_data,
        epochs=epochs,
        steps_per_epoch=steps,
        callbacks=[*callbacks, interrupt],
        verbose=cfg.trainer.verbose,
        shuffle=False,  # the batcher shuffles, seeded
    )
    try:
        with interrupt.installed(), p.placement.scope():
            epochs_done = p.run.checkpoints.epochs_in_backup() if p.batches_done else 0
            if p.batches_done and epochs_done < cfg.trainer.epochs:
                # Resumed mid-epoch: the rest of that epoch first, as a `fit` of its own, so that epochs keep ending
                # where the uninterrupted run's did; then the epochs after it, on the stream from their first batch.
                history = fit_epochs(p.train_data, epochs_done + 1, p.steps_per_epoch - p.batches_done)
                if not p.model.stop_training and epochs_done + 1 < cfg.trainer.epochs:
                    after = p.train_from((epochs_done + 1) * p.steps_per_epoch)
                    rest = fit_epochs(after, cfg.trainer.epochs, p.steps_per_epoch)
                    history = merged(history, rest)
            else:
                history = fit_epochs(p.train_data, cfg.trainer.epochs, p.steps_per_epoch)
        if interrupt.received:  # a signal during the last epoch's final hooks: still an interrupt
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        path = p.run.checkpoints.interrupted if p.placement.chief else scratch_dir() / "interrupted.weights.h5"
        write_atomically(path, p.model.save_weights)  # the weights of the moment, for inspection
        raise Interrupted(interrupt.received or signal.SIGINT, path, p.run.checkpoints.resume_point()) from None
    except StoppedEarly as stopped:  # patience or time spent at a resume, or within an epoch: go on to finish
        logger.info("%s", stopped)
    wall_seconds = time.perf_counter() - started
    updates = optimizer_step(p.model)
    if p.schedule.cooldown_steps and updates < p.total_steps:
        logger.warning(
            "the run stopped after %d of the %d updates its cool-down (optim.cooldown) was planned for, so the "
            "learning rate did not cool down; lower trainer.epochs to what trainer.max_minutes holds",
            updates,
            p.total_steps,
        )
    run_seconds = draw_curves(cfg.name, p.run) if p.placement.chief else None
    losses = history.history.get("loss", []) if history else []
    if losses and not math.isfinite(losses[-1]):
        raise KmtError(
            f"training diverged: the loss became {losses[-1]} in epoch {len(losses)}; the last good weights are in "
            f"{p.run.checkpoints.directory} (try a lower optim.lr_scale or more optim.warmup_steps)"
        )
    return Fitted(history, stats, wall_seconds, wall_seconds if run_seconds is None else run_seconds)


def merged(first, then):
    """The History of two `fit` calls in a row, as one: `then`'s epochs after `first`'s."""
    for key, values in then.history.items():
        first.history.setdefault(key, []).extend(values)
    first.epoch.extend(then.epoch)
    return first


def build_callbacks(
    trainer_cfg,
    optim_cfg,
    model_cfg,
    run,
    tokens_per_epoch,
    record,
    val_bleu=None,
    chief=True,
    steps_per_epoch=1,
    val_data=None,
):
    """The callbacks of a run in `run` (a `RunDir`), in the order their epoch-end hooks must run, and its
    `TrainingStats`, from the config's `trainer`, `optim` and `model` groups. `record`, the run's config as YAML, is
    written to the run's `config.yaml` when training begins. `val_bleu`, a `ValidationBLEU` or None, comes before
    everything that reads or times the epoch's logs. `steps_per_epoch` (batches) places the updates that
    `trainer.save_every_updates` saves at within their epoch; `val_data` is what `trainer.validate_every_updates`
    evaluates.

    A worker other than the `chief` of a distributed run writes nothing to the run: it resumes from the chief's
    resume state and saves its weights when the chief does, into a scratch directory (`scratch_dir`), since under
    JAX every process takes part in reading weights spread over processes."""
    stats = TrainingStats(tokens_per_epoch)
    accumulation, every_updates = optim_cfg.gradient_accumulation_steps, trainer_cfg.save_every_updates
    validate = trainer_cfg.validate_every_updates

    # after the resume state, whose update count it starts from (trainer.max_updates; older runs lack the key)
    limit = [UpdateLimit(trainer_cfg.max_updates, accumulation)] if trainer_cfg.get("max_updates") else []

    def validations(path):  # before the update checkpoint and resume state, as at epoch ends
        return [UpdateValidation(val_data, path, validate, accumulation, val_bleu)] if validate else []

    if not chief:
        scratch = scratch_dir()
        backup = AtomicBackupAndRestore(
            run.checkpoints.backup, accumulation, scratch / "backup.weights.h5", every_updates, steps_per_epoch
        )
        checkpoints = [  # in the chief's order
            *validations(scratch / "validations.csv"),
            EpochCheckpoint(scratch, keep=1, monitor=trainer_cfg.monitor),
            UpdateCheckpoint(scratch, every_updates, keep=1, batches_per_update=accumulation),
        ]
        callbacks = [keras.callbacks.TerminateOnNaN(), *([val_bleu] if val_bleu else []), stats, *checkpoints, backup]
        return [*callbacks, *limit], stats
    run.logs.mkdir(parents=True, exist_ok=True)
    validation = validations(run.validations)
    callbacks = [
        keras.callbacks.TerminateOnNaN(),
        *([val_bleu] if val_bleu else []),
        stats,
        HistoryCSV(run.history),  # before the backup: a resume drops rows the backup does not cover
        *validation,
        *tensorboard(run),
        # before the resume state: a kill once it holds the epoch finds the epoch's checkpoint (which averaging reads)
        EpochCheckpoint(run.checkpoints.directory, keep=trainer_cfg.keep_checkpoints, monitor=trainer_cfg.monitor),
        UpdateCheckpoint(run.checkpoints.directory, every_updates, trainer_cfg.keep_checkpoints, accumulation),
        # then the resume state: a kill after it loses nothing
        AtomicBackupAndRestore(
            run.checkpoints.backup, accumulation, every_updates=every_updates, steps_per_epoch=steps_per_epoch
        ),
        # config.yaml (what kmt-export rebuilds the model from) once the resume state has accepted this config, so
        # a resume refused for a changed setting leaves the run's record as it was
        keras.callbacks.LambdaCallback(on_train_begin=lambda logs: write_atomically(run.config, record)),
    ]
    if trainer_cfg.patience:  # after the checkpoint, which records the best epoch
        callbacks.append(
            EarlyStopping(run.checkpoints.directory, trainer_cfg.monitor, trainer_cfg.patience, *validation)
        )
    if model_cfg.late_dropout is not None:
        after = model_cfg.late_dropout_after, model_cfg.late_dropout_after_updates
        callbacks.insert(0, LateDropout(model_cfg.late_dropout, *after, batches_per_update=accumulation))
    callbacks.extend(limit)
    if trainer_cfg.max_minutes:
        every = math.gcd(every_updates, validate)  # at each update checkpoint and validation
        callbacks.append(TimeBudget(trainer_cfg.max_minutes * 60, run.history, every, accumulation))
    return callbacks, stats


def scratch_dir():
    """Where a distributed run's worker other than the chief saves what it must save along with the chief (removed
    when the process ends)."""
    global _scratch
    if _scratch is None:
        _scratch = tempfile.TemporaryDirectory(prefix="kmt-worker-")
    return Path(_scratch.name)


_scratch = None


def tensorboard(run):
    """Keras's TensorBoard callback, which writes with TensorFlow's summary ops: under the TensorFlow backend only,
    so a JAX or PyTorch run never imports TensorFlow (history.csv and curves.png hold the same curves)."""
    if keras.backend.backend() != "tensorflow":
        return []
    return [keras.callbacks.TensorBoard(log_dir=str(run.logs), write_graph=False)]


def validation_bleu(decode_cfg, decoder, vocabularies, val, tokenized=False):
    """`trainer.val_bleu`'s `ValidationBLEU`: translates `val` (a `kmt.data.shards.Text`) greedily with `decoder`,
    the float32 model, under the settings of `decode_cfg` (the config's `decode`); BLEU without further tokenization
    when the text is `tokenized`."""
    greedy = KerasTranslator(
        decoder, vocabularies, SearchSettings.from_config(decode_cfg).greedy(), batch_size=decode_cfg.batch_size
    )
    return ValidationBLEU(greedy.translate, val.source, val.target, decoder=decoder, tokenized=tokenized)


def draw_curves(name, run):
    """Draws the learning curves of the run `name` (the config's `name`) into `logs/curves.png`; returns the seconds
    of its epochs in history.csv, those of earlier invocations of a resumed run included (None when it has none)."""
    if not run.history.exists():
        return None
    history = read_history(run.root)
    logger.info(
        "learning curves: %s", plot_curves({run.root.name: history}, run.curves, title=curves_title(name, run.root))
    )
    return sum(seconds or 0.0 for seconds in history.get("epoch_seconds", []))


class Interrupted(KmtError):
    """Ctrl-C, SIGTERM or SIGHUP during training. `fit` saved the weights of the moment (`path`) for inspection,
    while the resume state stays where it was last saved (`point`, `Checkpoints.resume_point`: the end of the last
    completed epoch, or the last update `trainer.save_every_updates` saved at), so running the same command again
    continues exactly from there. The exit status is the shell's convention for a signal, 128 + its number (130 for
    Ctrl-C)."""

    def __init__(self, signum, path, point):
        self.exit_code = 128 + signum
        super().__init__(
            f"interrupted by {signal.Signals(signum).name}; the current weights are in {path}. Run the same "
            f"command again to resume after {point} (optimizer state and learning-rate step included)"
        )
