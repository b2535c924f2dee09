"""The rules the schema's types cannot say (ranges, divisibility, combinations), checked before any data is read.

`validate` runs them group by group, in the order below; the first one broken raises `ConfigError` naming the key
and the value received. It needs only omegaconf: no Hydra, no Keras.
"""

import copy

from omegaconf import OmegaConf, read_write

from kmt.config.schema import ACTIVATIONS, DATASETS, INHERITED, MONITORS, OBJECTIVES, POSITION_LAYOUTS, PRECISIONS
from kmt.errors import ConfigError
from kmt.models.registry import model_archs


def validated(cfg):
    """A validated, read-only copy of `cfg`: what a run works from (what a run resolves is recorded apart from it)."""
    validate(cfg)
    cfg = copy.deepcopy(cfg)
    with read_write(cfg):
        cfg.output_dir = None  # a Hydra job's directory, which only that job resolves: kmt.train's run_dir says where
    OmegaConf.set_readonly(cfg, True)
    return cfg


def validate(cfg):
    """Checks what the schema's types cannot, naming the key and the value received."""
    _check_job(cfg)
    _check_corpus(cfg)
    _check_training_files(cfg.data)
    _check_model(cfg.model)
    _check_optim(cfg.optim)
    _check_alignments(cfg)
    _check_terminology(cfg.data)
    _check_trainer(cfg.trainer)
    _check_cleaning(cfg.data.clean)
    _check_batches(cfg.data, cfg.model)
    _check_checkpoints(cfg.trainer)
    validate_decode(cfg.decode)


def validate_decode(decode):
    """The `decode` checks, those of `kmt.inference.settings.SearchSettings`, naming the key."""
    from kmt.inference.settings import SearchSettings, SettingsError

    try:
        SearchSettings.from_config(decode)
    except SettingsError as error:
        raise ConfigError(f"decode.{error}") from None


def _check(condition, message):
    if not condition:
        raise ConfigError(message)


def _check_choice(key, value, choices):
    _check(value in choices, f"{key} must be one of {', '.join(choices)}. Received: {value!r}")


def _check_job(cfg):
    """Every `???` set, and `output_dir` left to the Hydra job."""
    job_free = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "output_dir"])  # which a job resolves
    missing = sorted(OmegaConf.missing_keys(job_free))
    _check(not missing, f"{', '.join(missing)} must be set, e.g. {missing[0] if missing else ''}=VALUE")
    # output_dir: null, or ${hydra:runtime.output_dir}, which only the job resolves (older configs lack the key)
    output_dir = None if OmegaConf.is_interpolation(cfg, "output_dir") else cfg.get("output_dir")
    _check(
        output_dir is None,
        f"output_dir is the Hydra job's directory: set hydra.run.dir instead. Received: {output_dir!r}",
    )


def _check_corpus(cfg):
    """`data.name`, the seeds its corpus and the run draw with, and the options that apply to one corpus only."""
    data = cfg.data
    _check_choice("data.name", data.name, DATASETS)
    for key, seed in (("seed", cfg.seed), ("data.seed", data.seed)):  # what NumPy's generators take
        _check(0 <= seed < 2**32, f"{key} must be in [0, 2**32). Received: {seed}")
    _check(
        not data.tokenized or data.name == "multi30k",
        f"data.tokenized applies to data=multi30k only. Received: data.tokenized=true with data={data.name}",
    )
    _check(data.name != "prepared" or data.path, "data=prepared needs data.path=DIR, a directory made by kmt-prepare")


def _check_training_files(data):
    """`data.train_corpora` (named once each, positive weights) and the files data=parallel needs."""
    corpora = data.get("train_corpora") or []  # runs from before the option lack the key
    _check(
        not corpora or data.name in ("parallel", "wmt14_en_de"),
        f"data.train_corpora applies to data=parallel and data=wmt14_en_de. Received: data={data.name}",
    )
    names = [corpus.name or corpus.source for corpus in corpora]
    repeated = sorted({name for name in names if names.count(name) > 1})
    _check(not repeated, f"data.train_corpora names a corpus twice (raise its weight instead): {', '.join(repeated)}")
    for number, corpus in enumerate(corpora):
        _check(corpus.weight > 0, f"data.train_corpora[{number}].weight must be positive. Received: {corpus.weight}")
        _check(
            corpus.weight <= 1 or not data.get("clean", {}).get("deduplicate"),
            f"data.train_corpora[{number}].weight={corpus.weight} repeats pairs that data.clean.deduplicate=true "
            "would drop again: set one or the other",
        )
        _check(
            data.name != "parallel" or (corpus.source and corpus.target),
            f"data=parallel needs file paths: set data.train_corpora[{number}].source and .target",
        )
        _check(
            data.name != "wmt14_en_de" or not (corpus.source or corpus.target),
            f"data=wmt14_en_de's training corpora are named, not given files. Received: data.train_corpora[{number}]"
            f" with source={corpus.source!r}, target={corpus.target!r}",
        )
    if data.name == "parallel":
        unset = [
            f"data.{split}.{side}"
            for split in (("val",) if corpora else ("train", "val"))
            for side in ("source", "target")
            if not data[split][side]
        ]
        _check(not unset, f"data=parallel needs file paths: set {', '.join(f'{key}=PATH' for key in unset)}")


def _check_model(model):
    """The architecture, its sizes, its dropouts and the options that need one another."""
    _check_choice("model.arch", model.arch, model_archs())  # kmt.models' registry
    _check(model.score in ("general", "dot"), f"model.score must be general or dot. Received: {model.score!r}")
    _check(
        model.arch != "lstm" or model.hidden_dim % 2 == 0,
        f"model.arch=lstm needs an even model.hidden_dim (half a direction). Received: {model.hidden_dim}",
    )
    for key in ("num_layers", "hidden_dim", "num_heads", "intermediate_dim", "max_length"):
        _check(model[key] > 0, f"model.{key} must be positive. Received: model.{key}={model[key]}")
    _check(
        model.hidden_dim % model.num_heads == 0,
        "model.hidden_dim must be divisible by model.num_heads. "
        f"Received: hidden_dim={model.hidden_dim}, num_heads={model.num_heads}",
    )
    for key in ("dropout", "attention_dropout", "activation_dropout", "source_word_dropout", "target_word_dropout"):
        _check(0.0 <= model[key] < 1.0, f"model.{key} must be in [0, 1). Received: model.{key}={model[key]}")
    _check_choice("model.activation", model.activation, ACTIVATIONS)
    _check_choice("model.position_layout", model.position_layout, POSITION_LAYOUTS)
    _check(
        model.position_layout != "halves" or model.hidden_dim % 2 == 0,
        f"model.position_layout=halves needs an even model.hidden_dim. Received: {model.hidden_dim}",
    )
    _check(
        not model.output_bias or model.tied_output,
        "model.output_bias needs model.tied_output=true (an untied projection has its own bias)",
    )
    if model.late_dropout is not None:
        _check(
            0.0 <= model.late_dropout < 1.0,
            f"model.late_dropout must be in [0, 1) or null. Received: model.late_dropout={model.late_dropout}",
        )
        _check(
            model.late_dropout_after > 0 or model.late_dropout_after_updates > 0,
            f"model.late_dropout needs model.late_dropout_after > 0 epochs. Received: {model.late_dropout_after} (or "
            f"model.late_dropout_after_updates > 0 updates: {model.late_dropout_after_updates})",
        )
        _check(
            model.dropout > 0,
            "model.late_dropout needs model.dropout > 0 (the dropout layers' random state is "
            "made with the model). Received: model.dropout=0",
        )


def _check_optim(optim):
    """The loss's smoothing, the schedule and the optimizer's settings."""
    _check(
        0.0 <= optim.label_smoothing < 1.0,
        f"optim.label_smoothing must be in [0, 1). Received: {optim.label_smoothing}",
    )
    _check(optim.warmup_steps > 0, f"optim.warmup_steps must be positive. Received: {optim.warmup_steps}")
    _check(
        optim.gradient_accumulation_steps > 0,
        f"optim.gradient_accumulation_steps must be positive. Received: {optim.gradient_accumulation_steps}",
    )
    _check(optim.weight_decay >= 0, f"optim.weight_decay must be >= 0. Received: {optim.weight_decay}")
    _check(optim.lr_scale > 0, f"optim.lr_scale must be positive. Received: {optim.lr_scale}")
    _check(0.0 <= optim.cooldown <= 1.0, f"optim.cooldown must be in [0, 1]. Received: {optim.cooldown}")


def _check_alignments(cfg):
    """Guided alignment: which corpora `data.train.alignments` lines up with, the model it trains, its weight and
    the head the alignments are read from."""
    data, model = cfg.data, cfg.model
    weight = cfg.optim.get("guided_alignment_weight", 0.0)  # runs from before the options lack the keys
    _check(weight >= 0, f"optim.guided_alignment_weight must be >= 0. Received: {weight}")
    decoder_layers = model.num_decoder_layers or model.num_layers
    layer = model.get("alignment_layer")
    _check(
        layer is None or -decoder_layers <= layer < decoder_layers,
        f"model.alignment_layer must name one of the {decoder_layers} decoder layers (or be null). Received: {layer}",
    )
    heads = model.get("alignment_heads", 0)
    _check(
        0 <= heads <= model.num_heads,
        f"model.alignment_heads must be in [0, model.num_heads={model.num_heads}]. Received: {heads}",
    )
    alignments = data.train.get("alignments")
    if not alignments:
        return
    _check(
        data.name != "prepared",
        "data=prepared trains on the alignments prepared with it: give data.train.alignments to kmt-prepare. "
        f"Received: data.train.alignments={alignments}",
    )
    _check(
        data.name != "wmt14_en_de" and not data.get("train_corpora"),
        "data.train.alignments lines up with one training split as read, not with mixed corpora "
        f"(data.train_corpora, data=wmt14_en_de). Received: data={data.name}",
    )
    _check(
        model.arch == "transformer",
        f"data.train.alignments trains a Transformer's cross-attention. Received: model.arch={model.arch}",
    )


def _check_terminology(data):
    """The terminology transform annotates training sources as they are prepared."""
    terminology = data.get("terminology")  # runs from before the option lack the key
    if not terminology or not terminology.glossary:
        return
    name = f"data.terminology.glossary={terminology.glossary}"
    _check(0 < terminology.ratio <= 1, f"data.terminology.ratio must be in (0, 1]. Received: {terminology.ratio}")
    _check(
        data.name != "prepared",
        f"data=prepared trains on the terms annotated as it was prepared: give the glossary to kmt-prepare. "
        f"Received: {name}",
    )
    _check(
        not data.train.get("alignments"),
        f"the terminology transform adds words to the sources, which data.train.alignments's links do not count: "
        f"use one of them. Received: {name}",
    )


def _check_trainer(trainer):
    """How long the run trains, in what precision, and what it watches and returns."""
    _check(trainer.epochs > 0, f"trainer.epochs must be positive. Received: {trainer.epochs}")
    _check_choice("trainer.precision", trainer.precision, PRECISIONS)
    _check_choice("trainer.objective", trainer.objective, OBJECTIVES)
    _check_choice("trainer.monitor", trainer.monitor, MONITORS)
    _check(
        trainer.monitor != "val_bleu" or trainer.val_bleu,
        "trainer.monitor=val_bleu needs trainer.val_bleu=true (BLEU is only computed each epoch then)",
    )
    _check(trainer.patience >= 0, f"trainer.patience must be >= 0. Received: {trainer.patience}")
    _check(trainer.max_minutes >= 0, f"trainer.max_minutes must be >= 0. Received: {trainer.max_minutes}")
    max_updates = trainer.get("max_updates", 0)  # runs from before the option lack the key
    _check(max_updates >= 0, f"trainer.max_updates must be >= 0. Received: {max_updates}")


def _check_cleaning(clean):
    """`data.clean`'s rules for dropping training pairs."""
    _check(
        clean.max_length_ratio == 0 or clean.max_length_ratio >= 1,
        f"data.clean.max_length_ratio must be 0 (off) or >= 1. Received: {clean.max_length_ratio}",
    )
    _check(
        clean.invalid_utf8 in ("error", "drop"),
        f"data.clean.invalid_utf8 must be error or drop. Received: {clean.invalid_utf8!r}",
    )


def _check_batches(data, model):
    """How training sentences are segmented and batched: null only with data=prepared, whose directory's values are
    checked when the run starts."""
    unset = [f"data.{key}" for key in INHERITED if data[key] is None]
    _check(
        not unset or data.name == "prepared",
        f"{', '.join(unset)} may be null only with data=prepared (which takes them from its directory)",
    )
    if unset:
        return
    _check(data.max_tokens >= 0, f"data.max_tokens must be >= 0. Received: {data.max_tokens}")
    _check(data.bucket_width >= 0, f"data.bucket_width must be >= 0. Received: {data.bucket_width}")
    _check(data.subword_sampling >= 0, f"data.subword_sampling must be >= 0. Received: {data.subword_sampling}")
    _check(
        not data.subword_sampling or data.tokenizer.model_type == "unigram",
        "data.subword_sampling samples unigram segmentations; it needs data.tokenizer.model_type=unigram. "
        f"Received: {data.tokenizer.model_type!r}",
    )
    _check(data.max_tokens or data.batch_size > 0, f"data.batch_size must be positive. Received: {data.batch_size}")
    _check(
        data.max_tokens == 0 or data.max_tokens >= model.max_length,
        "data.max_tokens must hold one sentence of model.max_length tokens. "
        f"Received: max_tokens={data.max_tokens}, max_length={model.max_length}",
    )


def _check_checkpoints(trainer):
    """What the run keeps on disk, and how often it saves and validates within an epoch."""
    _check(
        trainer.keep_checkpoints >= max(1, trainer.average_last),
        "trainer.keep_checkpoints must keep the checkpoints trainer.average_last averages. "
        f"Received: keep_checkpoints={trainer.keep_checkpoints}, average_last={trainer.average_last}",
    )
    for key in ("save_every_updates", "validate_every_updates"):
        _check(trainer[key] >= 0, f"trainer.{key} must be 0 (off) or more. Received: {trainer[key]}")
