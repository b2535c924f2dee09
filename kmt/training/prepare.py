"""Training, step 1: everything `model.fit` needs, from the config and the run directory (seed, precision, whether
the run resumes, the fine-tuning source, corpus, vocabulary, encoded splits, the training stream, schedule, model)."""

import logging
from dataclasses import dataclass
from typing import Any

import keras
from omegaconf import OmegaConf

from kmt.build import build_model, build_schedule, compile_model
from kmt.checkpoints import init_source, load_weights
from kmt.data import load_corpus
from kmt.data.pipeline import count_batches, encode_split, make_dataset, resample, subword_sampler
from kmt.errors import KmtError
from kmt.run_dir import RunDir
from kmt.tokenizer import Vocabularies

logger = logging.getLogger(__name__)


@dataclass
class Prepared:
    """What `fit` and `finish` work on."""

    run: RunDir
    corpus: dict  # split name -> text pairs (`kmt.data.load_corpus`)
    vocabularies: Vocabularies
    splits: dict  # split name -> encoded pairs (`kmt.data.pipeline.EncodedSplit`)
    epoch: Any  # what an epoch of the training stream holds (the train split, or a draw of its segmentation)
    train_data: Any  # the repeated, shuffled stream of training batches
    val_data: Any
    batching: dict  # the batching settings of `make_dataset`, for evaluation
    steps_per_epoch: int  # batches
    updates_per_epoch: int  # optimizer updates (steps_per_epoch / optim.gradient_accumulation_steps)
    total_steps: int  # updates of the whole run, what the schedule counts
    schedule: Any
    model: keras.Model
    decoder: keras.Model  # the model in float32 (itself when it trains in float32): what decodes and exports


def prepare(cfg, run_dir):
    """Seeds, sets the precision and builds the run's data and model; a resumed run (one with a resume state) starts
    its stream after the batches of its finished epochs, a fine-tuning run (`trainer.init_from`) from another run's
    vocabulary and weights."""
    keras.utils.set_random_seed(cfg.seed)
    keras.config.set_dtype_policy(cfg.trainer.precision)
    run = RunDir(run_dir)
    resuming = run.checkpoints.resumable
    # A resume state that does not read stops here, before any data loads, saying what to do.
    epochs_done = run.checkpoints.epochs_in_backup() if resuming else 0
    # Fine-tuning starts from another run, unless this run is resuming: then its own resume state has the weights.
    init_run, init_weights = None, None
    if cfg.trainer.init_from and not resuming:
        init_run, init_weights = init_source(cfg.trainer.init_from, cfg.model)

    corpus = load_corpus(cfg.data)
    vocabularies = prepare_vocabularies(cfg, corpus, run.tokenizer, init_run)
    splits = {name: encode_split(name, text, vocabularies, cfg.model.max_length) for name, text in corpus.items()}
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
    batching = dict(max_length=cfg.model.max_length, max_tokens=cfg.data.max_tokens, batch_size=cfg.data.batch_size,
                    bucket_width=cfg.data.bucket_width, pad_to_bucket=cfg.data.pad_to_bucket)

    accumulation = cfg.optim.gradient_accumulation_steps
    updates_per_epoch = steps_per_epoch // accumulation
    total_steps = cfg.trainer.epochs * updates_per_epoch
    schedule = build_schedule(cfg.optim, cfg.model.hidden_dim, total_steps)
    sizes = vocabularies.source.vocab_size, vocabularies.target.vocab_size
    model = compile_model(build_model(cfg.model, *sizes), cfg, schedule)
    logger.info(
        "model: %s parameters; %d training pairs, %d steps an epoch%s", f"{model.count_params():,}",
        len(splits["train"]), steps_per_epoch,
        f" ({updates_per_epoch} updates of {accumulation} batches each)" if accumulation > 1 else "",
    )
    if init_weights is not None:
        _load_init_weights(model, init_weights)
    log_schedule(schedule, total_steps)
    # Decoding and the export run in float32 whatever the training precision (see build_model).
    decoder = model if cfg.trainer.precision == "float32" else build_model(cfg.model, *sizes, "float32")
    return Prepared(run, corpus, vocabularies, splits, epoch, train_data, make_dataset(splits["val"], **batching),
                    batching, steps_per_epoch, updates_per_epoch, total_steps, schedule, model, decoder)


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


def log_schedule(schedule, total_steps):
    """Logs the learning rate's peak, its cool-down if any, and its value at the run's last update."""
    rate = lambda update: float(schedule(update * schedule.gradient_accumulation_steps))  # noqa: E731 (batch-indexed)
    peak = rate(schedule.warmup_steps - 1)
    message = f"learning rate: peak {peak:.3g} at update {schedule.warmup_steps:,}"
    if schedule.cooldown_steps:
        message += f", cooled down linearly over the last {schedule.cooldown_steps:,} updates"
    message += f", {rate(total_steps - 1):.2g} at update {total_steps:,} (trainer.epochs)"
    logger.info(message)


def _load_init_weights(model, path):
    try:
        load_weights(model, path)
    except ValueError as error:
        raise KmtError(f"trainer.init_from: {path} does not load into this model "
                       f"({str(error).splitlines()[0]})") from None
    logger.info("fine-tuning from %s; the optimizer and learning-rate schedule start afresh", path)
