"""Training, step 1: everything `model.fit` needs, from the config and the run directory (seed, precision, whether
the run resumes, the fine-tuning source, the prepared data and its vocabulary, the training stream, schedule, model).

The data is prepared token ids (`kmt.data.shards`): `data=prepared` names a `kmt-prepare` directory, any other corpus
is prepared into the run directory's `data/` first. Its batches come from the one batcher (`kmt.data.batches`), through
tf.data under TensorFlow and a Keras `PyDataset` under JAX and PyTorch; nothing here imports TensorFlow itself.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import keras
from omegaconf import OmegaConf

from kmt import backend
from kmt import config as config_lib
from kmt.build import build_model, build_schedule, compile_model
from kmt.checkpoints import fine_tuned_model, init_source, load_weights
from kmt.data.batches import Batcher, keras_data
from kmt.data.prepared import prepare_data
from kmt.data.shards import PreparedData
from kmt.errors import ConfigError, KmtError
from kmt.models.transformer import alignment_layer_index
from kmt.run_dir import RunDir
from kmt.tokenizer import Vocabularies
from kmt.training.distribute import Placement, place

logger = logging.getLogger(__name__)


@dataclass
class Resolved:
    """What a run decides that its config leaves open, kept apart from the (read-only) config and recorded with it
    in the run's `config.yaml` (`run_config`)."""

    precision: str  # trainer.precision=auto: float32, or mixed_bfloat16 / mixed_float16 on an accelerator
    jit_compile: bool  # trainer.jit_compile=auto: XLA on an accelerator
    verbose: int  # trainer.verbose, or 0 (no progress bar) on a distributed run's workers other than the chief
    data: dict = field(default_factory=dict)  # data=prepared: the batching settings of the prepared directory
    model: dict = field(default_factory=dict)  # trainer.init_from: the shape of the model fine-tuning starts from


def run_config(cfg, resolved):
    """The config a run trained with: `cfg` with what the run `resolved`, read-only (`config.yaml` records it)."""
    merged = OmegaConf.merge(
        cfg,
        {
            "trainer": {
                "precision": resolved.precision,
                "jit_compile": resolved.jit_compile,
                "verbose": resolved.verbose,
            },
            "data": resolved.data,
            "model": resolved.model,
        },
    )
    OmegaConf.set_readonly(merged, True)
    return merged


@dataclass
class Prepared:
    """What `fit` and `finish` work on."""

    cfg: Any  # the run's config (`run_config`): what fit and finish read, and config.yaml records
    run: RunDir
    data: PreparedData
    vocabularies: Vocabularies
    texts: dict  # split name -> every line of val and test as read (`kmt.data.shards.Text`), for BLEU
    epoch: Any  # what an epoch of the training stream holds (the train split, or a draw of its segmentation)
    train_data: Any  # the repeated, shuffled stream of training batches
    val_data: Any
    evaluation_data: Callable  # split name -> one pass over its batches, for model.evaluate
    steps_per_epoch: int  # batches
    batches_done: int  # batches of the epoch in progress a resumed run has done (a resume state saved mid-epoch)
    train_from: Callable  # batches already trained -> the training stream after them
    updates_per_epoch: int  # optimizer updates (steps_per_epoch / optim.gradient_accumulation_steps)
    total_steps: int  # updates of the whole run, what the schedule counts
    schedule: Any
    model: keras.Model
    decoder: keras.Model  # the model in float32 (itself when it trains in float32): what decodes and exports
    placement: Placement  # the devices and processes it trains on (trainer.distribute)
    build: Callable  # a compiled model like `model`, on this process alone (what `finish` works on when distributed)


def prepare(cfg, run_dir, verbose=None):
    """Seeds, sets the precision and builds the run's data and model; a resumed run (one with a resume state) starts
    its stream after the batches it trained (whole epochs, and those of an epoch saved mid-way), a fine-tuning run
    (`trainer.init_from`) from another run's vocabulary and weights. `cfg` is read, never changed: what the run
    resolves (`Resolved`: the precision, XLA, a prepared directory's batching, `verbose` when given) makes
    `Prepared.cfg`."""
    backend.keep_tensorflow_out()
    placement = place(cfg.trainer)  # first: a JAX process joins its cluster before it computes anything
    keras.utils.set_random_seed(cfg.seed)
    resolved = Resolved(
        backend.resolve_precision(cfg.trainer.precision),
        backend.resolve_jit_compile(cfg.trainer.jit_compile),
        cfg.trainer.verbose if verbose is None else verbose,
    )
    keras.config.set_dtype_policy(resolved.precision)
    logger.info(
        "Keras %s backend, %s, XLA %s", backend.name(), resolved.precision, "on" if resolved.jit_compile else "off"
    )
    run = RunDir(run_dir)
    resuming = run.checkpoints.resumable
    # A resume state that does not read stops here, before any data loads, saying what to do.
    state = (run.checkpoints.resume_state() or {}) if resuming else {}
    epochs_done, batches_done = state.get("epoch", 0), state.get("batch", 0)
    # Fine-tuning starts from another run, unless this run is resuming: then its own resume state has the weights.
    init_run, init_weights = None, None
    if cfg.trainer.init_from:  # the model's shape is the starting run's (recorded in this run's config.yaml)
        if resuming:
            start_model = run.read_config().model
        else:
            init_run, init_weights, start_model = init_source(cfg.trainer.init_from)
        resolved.model = fine_tuned_model(cfg.model, start_model)
        cfg = run_config(cfg, resolved)

    record = OmegaConf.to_yaml(cfg, resolve=True)  # what a corpus prepared into the run records
    data, vocabularies = prepared_data(cfg.data, cfg.model, run, record, init_run, writes=placement.chief)
    if cfg.data.name == "prepared":
        resolved.data = inherited_data_settings(cfg.data, data.config().data)
    guided = guided_alignment(cfg, data.split("train"))
    if guided:  # exports and kmt-translate read the alignments from the head it supervised
        resolved.model = {**resolved.model, "alignment_heads": 1, "alignment_layer": guided_layer(cfg.model)}
    cfg = run_config(cfg, resolved)
    config_lib.validate(cfg)  # data=prepared: its batching settings, now known
    train = data.split("train")
    if not len(train):
        raise KmtError(f"no training pairs left after filtering empty and over-long pairs ({train.dropped})")
    fixed_shapes = cfg.data.pad_to_bucket or cfg.trainer.jit_compile  # XLA compiles once per shape

    # Guided alignment: every batch carries its subword links, those of val and test none (their loss is the
    # translation's alone), since the model takes them as an input.
    words = (vocabularies.source.word_starts, vocabularies.target.word_starts) if guided else None

    def batcher(split, local=False, **options):
        spread = {} if local else {"replicas": placement.replicas, "shard": (placement.index, placement.processes)}
        return Batcher(
            split,
            cfg.model.max_length,
            cfg.data.max_tokens,
            cfg.data.batch_size,
            cfg.data.bucket_width,
            fixed_shapes,
            **options,
            **spread,
            alignment=words,
        )

    train_batches = batcher(
        train, seed=cfg.seed, sampling=subword_sampling(cfg.data.subword_sampling, train, vocabularies)
    )
    accumulation = cfg.optim.gradient_accumulation_steps
    # A whole number of updates an epoch, so epochs (checkpoints, the resume state) never end mid-accumulation; the
    # stream repeats, so the few batches this leaves out start the next epoch.
    steps_per_epoch = max(1, train_batches.steps_per_pass // accumulation) * accumulation
    if cfg.data.subword_sampling:
        logger.info(
            "subword sampling (alpha %g): a pass draws %.1f%% more target tokens than the best segmentation",
            cfg.data.subword_sampling,
            100 * (train_batches.epoch_rows.target_tokens / train.target_tokens - 1),
        )
    skip = epochs_done * steps_per_epoch + batches_done
    if skip:
        logger.info("resuming the training stream after its first %d batches (passing over them first)", skip)
    train_from = lambda batches: keras_data(train_batches, skip=batches)  # noqa: E731

    def evaluation_data(name, local=False):
        one = batcher(data.split(name), local=local)
        return keras_data(one, items=one.one_pass())

    texts = {name: data.split(name).text() for name in ("val", "test") if name in data.names}
    updates_per_epoch = steps_per_epoch // accumulation
    total_steps = cfg.trainer.epochs * updates_per_epoch
    max_updates = cfg.trainer.get("max_updates", 0)  # runs from before the option lack the key
    if max_updates:
        total_steps = min(total_steps, max_updates)
    schedule = build_schedule(cfg.optim, cfg.model.hidden_dim, total_steps)
    sizes = vocabularies.source.vocab_size, vocabularies.target.vocab_size
    weight = cfg.optim.guided_alignment_weight if guided else 0.0
    build = lambda: compile_model(  # noqa: E731
        build_model(cfg.model, *sizes, guided_alignment_weight=weight), cfg.optim, schedule, cfg.trainer.jit_compile
    )
    with placement.scope():
        model = build()
    logger.info(
        "model: %s parameters; %d training pairs, %d steps an epoch%s",
        f"{model.count_params():,}",
        len(train),
        steps_per_epoch,
        f" ({updates_per_epoch} updates of {accumulation} batches each)" if accumulation > 1 else "",
    )
    if init_weights is not None:
        with placement.scope():
            _load_init_weights(model, init_weights, build_model(cfg.model, *sizes, "float32"))
    log_schedule(schedule, total_steps, "trainer.max_updates" if total_steps == max_updates else "trainer.epochs")
    # Decoding and the export run in float32 whatever the training precision (see build_model).
    # A distributed model's variables are spread over devices: the decoder is a copy on this process alone. A guided
    # model's graph takes the alignments too: the decoder is the plain graph, which translates and scores.
    own = cfg.trainer.precision == "float32" and not placement.distributed and not guided
    decoder = model if own else build_model(cfg.model, *sizes, "float32")
    return Prepared(
        cfg,
        run,
        data,
        vocabularies,
        texts,
        train_batches.epoch_rows,
        train_from(skip),
        evaluation_data("val"),
        evaluation_data,
        steps_per_epoch,
        batches_done,
        train_from,
        updates_per_epoch,
        total_steps,
        schedule,
        model,
        decoder,
        placement,
        build,
    )


def prepared_data(data_cfg, model_cfg, run, record, init_run=None, writes=True):
    """The run's prepared data and vocabulary, from the config's `data` and `model` groups. `data=prepared` reads
    `data.path`; other corpora are prepared into the run's `data/` (kept there, so a resumed run reads them back),
    which records the config `record` (YAML, see `prepare_data`). The vocabulary is the run's own when it has one
    (resume), else a fine-tuning source's (`init_run`: the weights fit only its vocabulary), else the data's; it is
    saved in the run's `tokenizer/` (unless not `writes`: a distributed run's workers other than the chief)."""
    own = Vocabularies.load(run.tokenizer) if Vocabularies.exists(run.tokenizer) else None
    given = own or (Vocabularies.load(RunDir(init_run).tokenizer) if init_run is not None else None)
    if data_cfg.name == "prepared":
        data = PreparedData(data_cfg.path)
        if data.max_length != model_cfg.max_length:
            raise ConfigError(
                f"data.path={data_cfg.path} was prepared with model.max_length={data.max_length}; "
                f"set model.max_length={data.max_length} (it is {model_cfg.max_length}) or prepare "
                "again"
            )
        if given is not None and not given.same_as(data.vocabularies):
            whose = "this run's tokenizer/" if own else f"the vocabulary of {init_run} (trainer.init_from)"
            raise ConfigError(
                f"data.path={data_cfg.path} holds another vocabulary than {whose}; prepare it with "
                f"data.vocabulary={run.tokenizer if own else init_run}"
            )
    else:
        if given is not None and not own:
            logger.info("using the vocabulary of %s (data.tokenizer is not used)", init_run)
        data = prepare_data(data_cfg, model_cfg, run.data, record, given)
    if own is None and writes:
        data.vocabularies.save(run.tokenizer)
    elif Vocabularies.exists(run.tokenizer):
        logger.info("reusing the vocabulary in %s", run.tokenizer)
    return data, data.vocabularies


# What a prepared directory's own config decides about its data, unless the run's config sets it again.
DATA_SETTINGS = ("max_tokens", "batch_size", "bucket_width", "pad_to_bucket", "subword_sampling")


def inherited_data_settings(data_cfg, prepared_data_cfg):
    """`data=prepared` replaces the corpus's data option (`data/multi30k.yaml`): its batching settings are null
    there (`conf/data/prepared.yaml`) and come from the config the data was prepared with, unless set
    (`data.max_tokens=...`). `data.tokenized` (how BLEU is computed) always comes from there."""
    inherited = {
        key: prepared_data_cfg[key] for key in DATA_SETTINGS if data_cfg[key] is None and key in prepared_data_cfg
    }
    return inherited | {"tokenized": prepared_data_cfg.get("tokenized", False)}


def guided_layer(model):
    """The index of the decoder layer a guided run supervises, which the run saves as `model.alignment_layer` so that
    its exports read it whatever the default becomes."""
    return alignment_layer_index(model.get("alignment_layer"), model.num_decoder_layers or model.num_layers)


def guided_alignment(cfg, train):
    """Whether the run trains on word alignments: its training split has them (`data.train.alignments`, prepared
    with the data) and `optim.guided_alignment_weight` is positive. Logs what it decides."""
    if train.links is None:
        return False
    source = train.entry["alignments"]["file"]
    weight = cfg.optim.get("guided_alignment_weight", 0.0)  # runs from before the option lack the key
    if not weight:
        logger.info("the training pairs' alignments (%s) are not trained on: optim.guided_alignment_weight=0", source)
        return False
    layer = guided_layer(cfg.model)
    logger.info(
        "guided alignment: head 0 of decoder layer %d learns the alignments of %s (weight %g); "
        "model.alignment_heads=1, so alignments are read from that head",
        layer,
        source,
        weight,
    )
    return True


def subword_sampling(alpha, train, vocabularies):
    """The batcher's `sampling` for `data.subword_sampling` (`alpha`; 0 or None: none): each pass segments the kept
    pairs' text afresh."""
    if not alpha:
        return None
    text = train.text()
    return (vocabularies, alpha, [text.source[i] for i in text.kept], [text.target[i] for i in text.kept])


def log_schedule(schedule, total_steps, limit="trainer.epochs"):
    """Logs the learning rate's peak, its cool-down if any, and its value at the run's last update (which `limit`
    sets)."""
    rate = lambda update: float(schedule(update * schedule.gradient_accumulation_steps))  # noqa: E731 (batch-indexed)
    peak = rate(schedule.warmup_steps - 1)
    message = f"learning rate: peak {peak:.3g} at update {schedule.warmup_steps:,}"
    if schedule.cooldown_steps:
        message += f", cooled down linearly over the last {schedule.cooldown_steps:,} updates"
    message += f", {rate(total_steps - 1):.2g} at update {total_steps:,} ({limit})"
    logger.info(message)


def _load_init_weights(model, path, plain):
    """Sets `model` to the weights of `path`, read into `plain` (the same model uncompiled): a run's checkpoint also
    holds its optimizer's state (the moments, the update count that the learning-rate schedule reads), which a
    fine-tuning run does not take."""
    try:
        load_weights(plain, path)
    except ValueError as error:
        raise KmtError(
            f"trainer.init_from: {path} does not load into this model ({str(error).splitlines()[0]})"
        ) from None
    model.set_weights(plain.get_weights())
    logger.info("fine-tuning from %s; the optimizer and learning-rate schedule start afresh", path)
