"""`train(cfg, run_dir)`: config -> tokenizer -> tf.data -> model.fit -> checkpoints -> metrics -> export."""

import json
import logging
import math
import signal
import time
from pathlib import Path

import keras
from keras import ops
from omegaconf import OmegaConf

from kmt import config as config_lib
from kmt.build import build_model, build_schedule, compile_model
from kmt.callbacks import (
    AtomicBackupAndRestore,
    DeferredInterrupt,
    EpochCheckpoint,
    HistoryCSV,
    LateDropout,
    StoppedEarly,
    TimeBudget,
    TrainingStats,
    ValidationBLEU,
)
from kmt.checkpoints import average_checkpoints, init_source
from kmt.curves import plot_curves, read_history
from kmt.data import load_corpus
from kmt.data.pipeline import count_batches, encode_split, make_dataset, resample, subword_sampler
from kmt.errors import KmtError
from kmt.inference.export import export_translator
from kmt.inference.translate import batch_fn, translate_lines
from kmt.inference.translator import build_translator
from kmt.metrics import translation_scores
from kmt.run_dir import RunDir, RunLock, load_weights, write_atomically
from kmt.tokenizer import Vocabularies

logger = logging.getLogger(__name__)


def prepare_vocabularies(cfg, corpus, directory, init_run=None):
    """The run's vocabularies: loaded from `directory` when the run already has them (resume), else copied from
    `init_run` (fine-tuning: the weights only fit that run's vocabulary), else trained on the training split; saved
    in `directory`."""
    if Vocabularies.exists(directory):
        logger.info("reusing the vocabulary in %s", directory)
        return Vocabularies.load(directory)
    if init_run is not None:
        vocabularies = Vocabularies.load(RunDir(init_run).tokenizer)
        vocabularies.save(directory)
        logger.info("using the vocabulary of %s (data.tokenizer is not used)", init_run)
        return vocabularies
    options = OmegaConf.to_container(cfg.data.tokenizer)
    train = corpus["train"]
    vocabularies = Vocabularies.train(train.source, train.target, joint=cfg.model.shared_embeddings, **options)
    vocabularies.save(directory)
    return vocabularies


def build_callbacks(cfg, run_dir, tokens_per_epoch, val_bleu=None):
    """The run's callbacks, in the order their epoch-end hooks must run, and its `TrainingStats`. `val_bleu`, a
    `ValidationBLEU` or None, comes before everything that reads or times the epoch's logs."""
    run = RunDir(run_dir)
    run.logs.mkdir(parents=True, exist_ok=True)
    stats = TrainingStats(tokens_per_epoch)
    callbacks = [
        keras.callbacks.TerminateOnNaN(),
        *([val_bleu] if val_bleu else []),
        stats,
        HistoryCSV(run.history),  # before the backup: a resume drops rows the backup does not cover
        keras.callbacks.TensorBoard(log_dir=str(run.logs), write_graph=False),
        # then the resume state: a kill after it loses nothing
        AtomicBackupAndRestore(run.checkpoints.backup, batches_per_update=cfg.optim.gradient_accumulation_steps),
        # config.yaml (what kmt-export rebuilds the model from) once the resume state has accepted this config, so
        # a resume refused for a changed setting leaves the run's record as it was
        keras.callbacks.LambdaCallback(on_train_begin=lambda logs: write_atomically(
            run.config, OmegaConf.to_yaml(cfg, resolve=True))),
        EpochCheckpoint(run.checkpoints.directory, keep=cfg.trainer.keep_checkpoints, monitor=cfg.trainer.monitor,
                        patience=cfg.trainer.patience),
    ]
    if cfg.model.late_dropout is not None:
        callbacks.insert(0, LateDropout(cfg.model.late_dropout, cfg.model.late_dropout_after))
    if cfg.trainer.max_minutes:
        callbacks.append(TimeBudget(cfg.trainer.max_minutes * 60, run.history))
    return callbacks, stats


def train(cfg, run_dir):
    """Trains (or resumes) the run in `run_dir` and returns its validation `cfg.trainer.objective`.

    Everything the run makes goes under `run_dir`: `config.yaml` (resolved), `tokenizer/`, `checkpoints/`,
    `logs/` (history.csv and TensorBoard), `model.keras`, `export/` and `metrics.json`.
    """
    run_dir = Path(run_dir)
    config_lib.validate(cfg)
    with RunLock(run_dir):
        return _train(cfg, run_dir)


def training_stream(cfg, train, vocabularies, epochs_done=0):
    """The repeated, shuffled stream of training batches kmt-train fits on: `(dataset, epoch, steps_per_epoch)`.

    `epoch` is what an epoch of the stream holds: `train` itself, or with `data.subword_sampling` a seeded draw of its
    segmentation (`resample`), since the stream then tokenizes every pass afresh. `steps_per_epoch` (batches, what
    `model.fit` counts) is a whole number of updates, so epochs (checkpoints, the resume state) never end
    mid-accumulation; the stream repeats, so the few batches this leaves out start the next epoch. A run resumed
    after `epochs_done` epochs starts after their batches, on the ones the uninterrupted run would have had next.
    """
    max_length, alpha = cfg.model.max_length, cfg.data.subword_sampling
    epoch, resegment = train, None
    if alpha:
        epoch = resample(train, vocabularies, max_length, alpha, cfg.seed)
        resegment = subword_sampler(vocabularies, alpha, cfg.seed)
    accumulation = cfg.optim.gradient_accumulation_steps
    batches = count_batches(epoch, max_length, cfg.data.max_tokens, cfg.data.batch_size, cfg.data.bucket_width,
                            repeated=True)
    steps_per_epoch = max(1, batches // accumulation) * accumulation
    dataset = make_dataset(train, max_length, max_tokens=cfg.data.max_tokens, batch_size=cfg.data.batch_size,
                           bucket_width=cfg.data.bucket_width, pad_to_bucket=cfg.data.pad_to_bucket, shuffle=True,
                           seed=cfg.seed, repeat=True, resegment=resegment, skip=epochs_done * steps_per_epoch)
    return dataset, epoch, steps_per_epoch


def _train(cfg, run_dir):
    keras.utils.set_random_seed(cfg.seed)
    keras.config.set_dtype_policy(cfg.trainer.precision)

    # Fine-tuning starts from another run, unless this run is resuming: then its own resume state has the weights.
    run = RunDir(run_dir)
    resuming = run.checkpoints.resumable
    # A resumed run goes on with the stream where the finished epochs left it, not from its first batch again. (A
    # resume state that does not read stops here, before any data loads, saying what to do.)
    epochs_done = run.checkpoints.epochs_in_backup() if resuming else 0
    init_run, init_weights = None, None
    if cfg.trainer.init_from and not resuming:
        init_run, init_weights = init_source(cfg.trainer.init_from, cfg.model)
    corpus = load_corpus(cfg.data)
    vocabularies = prepare_vocabularies(cfg, corpus, run.tokenizer, init_run)
    max_length = cfg.model.max_length
    splits = {name: encode_split(name, text, vocabularies, max_length) for name, text in corpus.items()}
    if not len(splits["train"]):
        raise KmtError(f"no training pairs left after filtering empty and over-long pairs ({splits['train'].dropped})")
    train_data, epoch, steps_per_epoch = training_stream(cfg, splits["train"], vocabularies, epochs_done)
    if cfg.data.subword_sampling:
        logger.info(
            "subword sampling (alpha %g): a pass draws %.1f%% more target tokens than the best segmentation",
            cfg.data.subword_sampling, 100 * (epoch.target_tokens / splits["train"].target_tokens - 1),
        )
    if epochs_done:
        logger.info("resuming the training stream after the %d batches of epochs 1-%d (passing over them first)",
                    epochs_done * steps_per_epoch, epochs_done)
    accumulation = cfg.optim.gradient_accumulation_steps
    updates_per_epoch = steps_per_epoch // accumulation
    batching = dict(max_length=max_length, max_tokens=cfg.data.max_tokens, batch_size=cfg.data.batch_size,
                    bucket_width=cfg.data.bucket_width, pad_to_bucket=cfg.data.pad_to_bucket)
    val_data = make_dataset(splits["val"], **batching)

    total_steps = cfg.trainer.epochs * updates_per_epoch  # updates, what the schedule and optimizer count
    schedule = build_schedule(cfg.optim, cfg.model.hidden_dim, total_steps)
    model = compile_model(
        build_model(cfg.model, vocabularies.source.vocab_size, vocabularies.target.vocab_size), cfg, schedule
    )
    logger.info(
        "model: %s parameters; %d training pairs, %d steps an epoch%s", f"{model.count_params():,}",
        len(splits["train"]), steps_per_epoch,
        f" ({updates_per_epoch} updates of {accumulation} batches each)" if accumulation > 1 else "",
    )
    if init_weights is not None:
        try:
            load_weights(model, init_weights)
        except ValueError as error:
            raise KmtError(f"trainer.init_from: {init_weights} does not load into this model "
                           f"({str(error).splitlines()[0]})") from None
        logger.info("fine-tuning from %s; the optimizer and learning-rate schedule start afresh", init_weights)
    log_schedule(schedule, total_steps)
    decoder = model  # decoding and the export run in float32 whatever the training precision (see build_model)
    if cfg.trainer.precision != "float32":
        decoder = build_model(cfg.model, vocabularies.source.vocab_size, vocabularies.target.vocab_size, "float32")
    val_bleu = None
    if cfg.trainer.val_bleu:
        greedy = build_translator(decoder, vocabularies, cfg.decode, beam_size=1)
        val_bleu = ValidationBLEU(
            lambda lines: translate_lines(batch_fn(greedy.translate), lines, cfg.decode.batch_size),
            corpus["val"].source, corpus["val"].target, decoder=decoder, tokenized=cfg.data.tokenized,
        )
    callbacks, stats = build_callbacks(cfg, run_dir, epoch.target_tokens, val_bleu)
    interrupt = DeferredInterrupt()  # last: an epoch's backup is written before Ctrl-C is acted on
    started, history = time.perf_counter(), None
    try:
        with interrupt.installed():
            history = model.fit(
                train_data,
                validation_data=val_data,
                epochs=cfg.trainer.epochs,
                steps_per_epoch=steps_per_epoch,
                callbacks=[*callbacks, interrupt],
                verbose=cfg.trainer.verbose,
                shuffle=False,  # the tf.data pipeline shuffles, seeded
            )
        if interrupt.received:  # a signal during the last epoch's final hooks: still an interrupt
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        raise Interrupted(model, run_dir, interrupt.received or signal.SIGINT) from None
    except StoppedEarly as stopped:  # a resumed run with no patience or time left: weights restored, go on
        logger.info("resumed run: %s", stopped)
    wall_seconds = time.perf_counter() - started
    if schedule.cooldown_steps and int(model.optimizer.iterations) < total_steps:
        logger.warning(
            "the run stopped after %d of the %d updates its cool-down (optim.cooldown) was planned for, so the "
            "learning rate did not cool down; lower trainer.epochs to what trainer.max_minutes holds",
            int(model.optimizer.iterations), total_steps,
        )
    run_seconds = wall_seconds  # the whole run's epochs, earlier invocations of a resumed run included
    if run.history.exists():
        run_history = read_history(run_dir)
        run_seconds = sum(seconds or 0.0 for seconds in run_history.get("epoch_seconds", []))
        curves = plot_curves({run_dir.name: run_history}, run.curves,
                             title=f"{cfg.name}: {run_dir.name}")
        logger.info("learning curves: %s", curves)
    losses = history.history.get("loss", []) if history else []
    if losses and not math.isfinite(losses[-1]):
        raise KmtError(
            f"training diverged: the loss became {losses[-1]} in epoch {len(losses)}; the last good weights are in "
            f"{run.checkpoints.directory} (try a lower optim.lr_scale or more optim.warmup_steps)"
        )
    write_atomically(run.model, model.save)
    if cfg.trainer.average_last > 1:
        paths = run.checkpoints.epochs()[-cfg.trainer.average_last :]
        average_checkpoints(model, paths)
        write_atomically(run.checkpoints.averaged(len(paths)), model.save_weights)

    if decoder is not model:
        decoder.set_weights(model.get_weights())
    translator = build_translator(decoder, vocabularies, cfg.decode)
    metrics = {"train": train_stats(epoch, stats, wall_seconds, run_seconds, updates_per_epoch, model)}
    metrics["train"]["averaged_checkpoints"] = max(1, min(cfg.trainer.average_last, len(run.checkpoints.epochs())))
    metrics["train"]["best"] = run.checkpoints.best_epoch(cfg.trainer.monitor)
    for name in ("val", "test"):
        if name in splits:
            metrics[name] = evaluate_split(
                model, translator, splits[name], corpus[name], batching, cfg.decode, tokenized=cfg.data.tokenized
            )
            logger.info("%s: %s", name, _summary(metrics[name]))
    if cfg.trainer.export:
        metrics["export"] = {"path": run.export.name, "bytes": export_translator(translator, run.export)}
    write_atomically(run.metrics, json.dumps(metrics, indent=2) + "\n")
    return metrics["val"][cfg.trainer.objective]


class Interrupted(KmtError):
    """Ctrl-C, SIGTERM or SIGHUP during training: the weights of the moment are saved for inspection, while the
    resume state stays at the end of the last completed epoch, so running the same command again continues exactly
    from there. The exit status is the shell's convention for a signal, 128 + its number (130 for Ctrl-C)."""

    def __init__(self, model, run_dir, signum):
        self.exit_code = 128 + signum
        checkpoints = RunDir(run_dir).checkpoints
        path = checkpoints.interrupted
        write_atomically(path, model.save_weights)
        epoch = checkpoints.epochs_in_backup()
        super().__init__(
            f"interrupted by {signal.Signals(signum).name}; the current weights are in {path}. Run the same "
            f"command again to resume after epoch {epoch} (optimizer state and learning-rate step included)"
        )


def log_schedule(schedule, total_steps):
    """Logs the learning rate's peak, its cool-down if any, and its value at the run's last update."""
    rate = lambda update: float(schedule(update * schedule.gradient_accumulation_steps))  # noqa: E731 (batch-indexed)
    peak = rate(schedule.warmup_steps - 1)
    message = f"learning rate: peak {peak:.3g} at update {schedule.warmup_steps:,}"
    if schedule.cooldown_steps:
        message += f", cooled down linearly over the last {schedule.cooldown_steps:,} updates"
    message += f", {rate(total_steps - 1):.2g} at update {total_steps:,} (trainer.epochs)"
    logger.info(message)


def train_stats(split, stats, wall_seconds, run_seconds, updates_per_epoch, model):
    """Throughput of this invocation: target tokens per second of training, leaving out the first epoch (which
    pays for tracing and compilation) when there are more. `wall_seconds` is this invocation's `model.fit`;
    `run_seconds`, `epochs` and `steps` (updates) count the whole run, earlier invocations of a resumed run included
    (`run_seconds` sums history.csv's `epoch_seconds`, training and validation, the time trainer.max_minutes counts)."""
    seconds = stats.epoch_seconds[1:] or stats.epoch_seconds
    steps = int(ops.convert_to_numpy(model.optimizer.iterations))
    return {
        "tokens_per_second": split.target_tokens * len(seconds) / sum(seconds) if seconds else None,
        "wall_seconds": wall_seconds,
        "run_seconds": run_seconds,
        "epochs": steps // updates_per_epoch,
        "steps": steps,
        "parameters": model.count_params(),
    }


def evaluate_split(model, translator, split, text, batching, decode_cfg, tokenized=False):
    """Loss, token accuracy and perplexity on the kept pairs; BLEU, chrF and exact match of decoded translations of
    every source sentence against its reference (BLEU without further tokenization when the text is `tokenized`)."""
    scores = model.evaluate(make_dataset(split, **batching), verbose=0, return_dict=True)
    translations, _ = translate_lines(batch_fn(translator.translate), text.source, decode_cfg.batch_size)
    kept = {name: scores[name] for name in ("loss", "accuracy", "ppl")}
    return kept | {"pairs": len(text)} | translation_scores(
        translations, text.target, tokenized
    )


def _summary(metrics):
    return ", ".join(f"{k} {v:.4g}" for k, v in metrics.items() if isinstance(v, float))
