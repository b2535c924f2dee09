"""Config schema: dataclasses registered in Hydra's ConfigStore, the single source of config names and defaults.

The defaults here are exactly what `kmt-train` runs with no overrides (the dates job: data=dates, model=tiny,
optim=noam, trainer=default, whose files under `conf/` restate nothing); every other option under `conf/` sets only
what differs. Each field's trailing comment is its one-line why; docs/gen_config_reference.py turns them into the
configuration reference. Hydra rejects unknown keys and wrong types against this schema; `validate` checks what types
cannot (ranges, divisibility) before any data is read.
"""

import contextlib
import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, read_write

from kmt.errors import ConfigError
from kmt.models.registry import model_archs

PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
DATASETS = ("dates", "multi30k", "spa_eng", "parallel", "wmt14_en_de", "prepared")
MONITORS = ("val_loss", "val_ppl", "val_accuracy", "val_bleu")  # what trainer.monitor may name
INHERITED = ("max_tokens", "batch_size", "bucket_width", "pad_to_bucket", "subword_sampling")  # data=prepared's
OBJECTIVES = ("loss", "ppl", "accuracy", "bleu", "chrf", "exact_match")  # what trainer.objective may name
ACTIVATIONS = ("relu", "gelu", "swish", "silu")  # what model.activation may name (swish and silu are one function)
POSITION_LAYOUTS = ("interleaved", "halves")  # what model.position_layout may name


@dataclass
class TokenizerConfig:
    vocab_size: int = 400  # subword pieces; a soft limit, small corpora may yield fewer (corpora of real text: 8000+)
    model_type: str = "unigram"  # SentencePiece algorithm: unigram or bpe
    character_coverage: float = 1.0  # 1.0 keeps every character of small corpora
    byte_fallback: bool = True  # spell unseen characters as UTF-8 bytes instead of <unk>


@dataclass
class SplitFiles:
    source: str | None = None  # path of the source-side file (data=parallel)
    target: str | None = None  # path of the target-side file, line-aligned with source


@dataclass
class TrainCorpus:
    name: str = ""  # what the log calls it; data=wmt14_en_de: europarl_v7, commoncrawl or news_commentary_v9
    source: str | None = None  # data=parallel: its source-side file (a built-in corpus's own files otherwise)
    target: str | None = None  # data=parallel: its target-side file, line-aligned with source
    weight: float = 1.0  # it contributes round(weight x its pairs): 2 repeats it, 0.5 draws half (kmt.data.mix_corpora)


@dataclass
class CleanConfig:
    max_length_ratio: float = 0.0  # drop training pairs whose longer side has over this many times the subword tokens
    # of the shorter (Moses clean-corpus-n's -ratio; fairseq's WMT14 En-De script: 1.5); 0: off, as in
    # fairseq-preprocess and OpenNMT, which leave cleaning to the corpus's own script
    deduplicate: bool = False  # drop training pairs that repeat an earlier pair exactly (a 64-bit hash per kept pair
    # held while preparing: about 80 bytes, 350 MB for WMT14's 4.5M pairs)
    drop_identical: bool = False  # drop training pairs whose source is their target (untranslated copies)
    invalid_utf8: str = "error"  # a training line of data=parallel that is not UTF-8: error (stop, naming the file and
    # line) or drop (drop its pair and count it); val and test lines always stop the run


@dataclass
class DataConfig:
    name: str = "dates"  # which corpus: dates (generated, offline), multi30k, spa_eng, parallel, wmt14_en_de, prepared
    path: str = ""  # data=prepared: a kmt-prepare directory to train from
    vocabulary: str = ""  # a tokenizer/ directory (or a run or prepared directory holding one) to use instead of
    # training a vocabulary
    dir: str = "${oc.env:KMT_DATA_DIR,data}"  # where corpora live (and are downloaded to)
    download: bool = True  # fetch a missing public corpus into `dir`
    source_lang: str = "en"  # multi30k: en, de, fr or cs; spa_eng: en or es
    target_lang: str = "de"  # the other side of the pair
    tokenized: bool = False  # multi30k: the lowercased, Moses-tokenized tok/ copies published numbers use
    seed: int = 1234  # generated data and the spa_eng split
    num_train: int = 20000  # dates: generated training pairs
    num_val: int = 1000  # dates: validation pairs (and spa_eng: unique English sentences held out)
    num_test: int = 1000  # dates: test pairs (and spa_eng: unique English sentences held out)
    limit: int | None = None  # use only the first `limit` pairs of each split (smoke tests, quick looks)
    # data=prepared leaves the next five null: they come from the prepared directory, unless set
    max_tokens: int | None = 2048  # tokens per batch, bucketed by length (real corpora: 4096); 0 to batch by batch_size
    batch_size: int | None = 64  # sentences per batch when max_tokens is 0
    bucket_width: int | None = 0  # length buckets every N tokens (1: one per length, least padding); 0: fixed edges
    pad_to_bucket: bool | None = False  # pad batches to fixed shapes (their bucket's width) even without XLA
    subword_sampling: float | None = 0.0  # alpha of subword regularization: each pass samples a segmentation of every
    # training sentence (unigram vocabularies; 0.5 changes about a third of sentences, 0.1 doubles their pieces);
    # 0: always the best segmentation
    train: SplitFiles = field(default_factory=SplitFiles)  # data=parallel: the training pairs' files
    val: SplitFiles = field(default_factory=SplitFiles)  # data=parallel: the validation pairs' files
    test: SplitFiles = field(default_factory=SplitFiles)  # data=parallel: optional (no test metrics without them)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)  # the joint subword vocabulary
    train_corpora: list[TrainCorpus] = field(default_factory=list)  # several training corpora, mixed by weight with
    # data.seed, in place of data.train (data=parallel; data=wmt14_en_de lists its three); empty: data.train alone
    mirror: str = ""  # data=wmt14_en_de: a URL (https://, file://) holding the archives under their upstream file
    # names, in place of statmt.org; empty: upstream
    clean: CleanConfig = field(default_factory=CleanConfig)  # what else drops training pairs (each rule counted in
    # the log and meta.json); val and test are kept whole


@dataclass
class ModelConfig:
    arch: str = "transformer"  # transformer, or lstm: the recurrent baseline (bidirectional LSTM encoder, LSTM
    # decoder with Luong attention and input feeding; num_heads, intermediate_dim and the Transformer-only options
    # below do not apply to it)
    score: str = "general"  # arch=lstm: Luong's attention score, general (h W e) or dot (h . e)
    num_layers: int = 2  # encoder layers N (the paper's base: 6)
    num_decoder_layers: int | None = None  # decoder layers; null means num_layers
    hidden_dim: int = 64  # d_model (the paper's base: 512)
    num_heads: int = 4  # h; must divide hidden_dim (the paper's base: 8)
    intermediate_dim: int = 256  # d_ff of the feed-forward networks (the paper's base: 2048)
    dropout: float = 0.1  # P_drop: residual and embedding dropout (the paper's base: 0.1)
    attention_dropout: float = 0.0  # dropout on attention weights
    activation_dropout: float = 0.0  # dropout after the feed-forward activation
    late_dropout: float | None = None  # residual and embedding dropout from epoch late_dropout_after + 1 on, in
    # place of model.dropout ("late dropout", Liu et al., 2023: learn fast, then regularize); null: off
    late_dropout_after: int = 0  # epochs trained with model.dropout before late_dropout takes over
    source_word_dropout: float = 0.0  # word dropout: zero a source token's whole embedded vector with this probability
    target_word_dropout: float = 0.0  # the same on the decoder's input tokens
    max_length: int = 48  # longest sentence in tokens: longer training pairs are dropped, inputs truncated (dates
    # are short; corpora of real text: 128-256)
    norm_first: bool = False  # pre-norm instead of the paper's post-norm
    shared_embeddings: bool = True  # one joint vocabulary and embedding for source and target
    tied_output: bool = True  # pre-softmax projection = target embedding transposed
    learned_positions: bool = False  # learned (BERT-style) instead of sinusoidal positions
    position_layout: str = "interleaved"  # sinusoids: interleaved sin/cos (the paper's) or halves (Marian's)
    activation: str = "relu"  # feed-forward inner activation: relu (the paper's), gelu, or swish/silu (Marian's)
    output_bias: bool = False  # a learned bias on the tied projection's logits (Marian's final_logits_bias)
    late_dropout_after_updates: int = 0  # >0: late_dropout takes over after this many updates instead of
    # model.late_dropout_after epochs (an epoch at WMT scale is hours)


@dataclass
class OptimConfig:
    warmup_steps: int = 400  # Noam warm-up; the peak learning rate is at this step (the paper's base: 4000 on WMT)
    lr_scale: float = 1.0  # multiplies the Noam schedule (small data likes 1-2)
    beta_1: float = 0.9  # Adam, as in the paper
    beta_2: float = 0.98  # Adam, as in the paper
    epsilon: float = 1e-9  # Adam, as in the paper
    label_smoothing: float = 0.1  # epsilon_ls of the paper
    clipnorm: float | None = None  # clip gradients to this global norm; null: no clipping
    weight_decay: float = 0.0  # decoupled weight decay (AdamW, Loshchilov & Hutter 2019): every update also shrinks
    # the kernels and embeddings by learning rate x this (biases and LayerNorm scales and offsets are left alone);
    # 0: Adam
    cooldown: float = 0.0  # last fraction of the run's updates (trainer.epochs) in which the rate falls linearly to ~0
    gradient_accumulation_steps: int = 1  # batches whose mean gradient makes one update (fairseq's --update-freq):
    # N x data.max_tokens tokens an update on a machine that holds one batch; warmup_steps and cooldown count updates


@dataclass
class TrainerConfig:
    epochs: int = 10  # passes over the training split (at most, with max_minutes or max_updates)
    max_updates: int = 0  # stop after this many optimizer updates, within an epoch (fairseq's --max-update; the
    # paper's base: 100k); the learning-rate schedule then plans for it; 0: trainer.epochs alone
    max_minutes: float = 0.0  # wall-clock budget: stop after the epoch another would overrun it; 0 for none
    precision: str = "auto"  # float32, mixed_float16, mixed_bfloat16, or auto: mixed_bfloat16 on GPUs that have
    # bfloat16 (compute capability 8.0+), float32 elsewhere
    jit_compile: bool | None = None  # XLA-compile the train step; null: where it helps (under JAX, and on GPUs
    # under TensorFlow), whose batches then come in fixed shapes (one compile per length bucket)
    keep_checkpoints: int = 5  # epoch checkpoints kept on disk (the newest); the best is always kept
    average_last: int = 0  # >1: score and export the average of the last N epoch checkpoints (paper, section 6.1)
    val_bleu: bool = False  # after every epoch, translate val greedily and log its sacreBLEU as val_bleu (fairseq's
    # --eval-bleu); costs one greedy decode of the val split an epoch
    monitor: str = "val_loss"  # what picks checkpoints/best.weights.h5 and drives patience: val_loss or val_ppl
    # (lower is better), val_accuracy or val_bleu (higher is better; needs trainer.val_bleu=true)
    patience: int = 0  # stop once this many epochs pass without a better trainer.monitor (fairseq's --patience);
    # 0: never
    export: bool = True  # write the SavedModel to <run>/export at the end
    init_from: str = ""  # fine-tune: a run directory (its last epoch's weights) or a .weights.h5 in its checkpoints/,
    # whose vocabulary and weights this run starts from; its model.* settings must be this run's (dropouts aside);
    # the optimizer and learning-rate schedule start afresh (fairseq's --restore-file --reset-optimizer)
    objective: str = "loss"  # val metric train() returns for sweepers: loss, ppl, accuracy, bleu, chrf, exact_match
    # (ppl, not loss, to compare different optim.label_smoothing)
    verbose: int = 1  # Keras progress: 0 silent, 1 progress bar, 2 one line per epoch
    distribute: str = "none"  # data parallelism: none, mirrored (every local device) or multi_worker (several
    # processes or hosts); docs/scaling.md
    coordinator: str | None = None  # multi_worker under JAX: HOST:PORT of process 0 (else KERAS_DISTRIBUTION_*)
    num_processes: int | None = None  # multi_worker under JAX: how many processes train together
    process_id: int | None = None  # multi_worker under JAX: this process, 0 (the chief) to num_processes - 1
    save_every_updates: int = 0  # also save checkpoints/update_NNNNNNN.weights.h5 and the resume state every N updates
    # (fairseq's --save-interval-updates); average_last then averages these; 0: at epoch ends only
    validate_every_updates: int = 0  # also validate every N updates into logs/validations.csv (val_bleu too with
    # val_bleu); patience then counts these validations; 0: at epoch ends only


@dataclass
class DecodeConfig:
    beam_size: int = 4  # 1 is greedy search
    length_penalty: float = 0.6  # GNMT alpha: score / ((5 + |Y|) / 6) ** alpha
    max_length_a: float = 1.5  # output limit: a * source length + b tokens (capped by model.max_length)
    max_length_b: int = 10  # the b of the output limit above
    batch_size: int = 64  # sentences per decoding batch when scoring val/test
    sampling_topk: int = 1  # with beam_size 1: 0 draws each token from the whole distribution, k > 1 from the k most
    # probable (back-translation, Edunov et al. 2018; OpenNMT-tf's sampling_topk); 1 is greedy search
    sampling_temperature: float = 1.0  # divides the logits tokens are drawn from: > 1 flatter, < 1 sharper
    sampling_topp: float = 1.0  # with sampling: draw from the fewest most probable tokens holding this much
    # probability (nucleus sampling; fairseq's --sampling-topp); 1 is off


@dataclass
class Config:
    name: str = "${data.name}"  # run name: runs/<name>/<timestamp>/
    seed: int = 1234  # weights, dropout and shuffling
    data: DataConfig = field(default_factory=DataConfig)  # the corpus, its vocabulary and its batches
    model: ModelConfig = field(default_factory=ModelConfig)  # the Transformer's shape and regularization
    optim: OptimConfig = field(default_factory=OptimConfig)  # Adam, the Noam schedule and the loss
    trainer: TrainerConfig = field(default_factory=TrainerConfig)  # the model.fit loop, checkpoints and export
    decode: DecodeConfig = field(default_factory=DecodeConfig)  # search for val/test scores and the export
    output_dir: str | None = None  # where kmt-train and kmt-prepare write: Hydra's output directory of the job
    # (hydra.run.dir, or a sweep job's under hydra.sweep.dir), which conf/config.yaml reads with
    # ${hydra:runtime.output_dir}; set hydra.run.dir, not this. Null once validated (kmt.compose_config, a run's
    # config.yaml): kmt.train takes its run directory as an argument


def onto_schema(saved):
    """A saved config (a run's `config.yaml`) merged onto the schema: an option added to kmt since the run was saved
    gets its default, and values set later are type-checked. The saved values win, except for one older meaning: a
    `spa_eng` run saved before that corpus took languages kept the schema's en -> de, and translated en -> es."""
    merged = OmegaConf.merge(OmegaConf.structured(Config), saved)
    data = merged.data
    if data.name == "spa_eng" and (data.source_lang, data.target_lang) == ("en", "de"):
        data.target_lang = "es"
    return merged


def register_configs():
    """Registers the schema so that `conf/config.yaml` (defaults list `- kmt_schema`) is checked against it. Every
    group's option is merged onto its typed node there (`data: DataConfig`, ...), so the groups need no schema of
    their own, which `kmt-train --help` would list among their options."""
    from hydra.core.config_store import ConfigStore  # here, so that `validate` needs only omegaconf (JAX bench)

    store = ConfigStore.instance()
    store.store(name="kmt_schema", node=Config)


def config_dir() -> str:
    """The directory that holds `config.yaml` and its groups, as a string (what Hydra takes).

    An installed wheel has it as package data at `kmt/conf`; a checkout, and an editable install of one, keeps it
    at the top of the repository beside `kmt/`, so an edited `conf/*.yaml` takes effect without reinstalling."""
    package = Path(__file__).resolve().parent
    shipped = package / "conf"
    return str(shipped if shipped.is_dir() else package.parent / "conf")


_TRAIN_LIST = re.compile(r"(\+{0,2})data\.train=(\s*\[.*)", re.DOTALL)


def aliased(overrides):
    """The overrides with `data.train=[...]` (a list of weighted corpora, as users of OpenNMT-tf's and Marian's
    training lists write it) spelled `data.train_corpora=[...]`, the key that holds it: `data.train` itself holds one
    corpus's `source` and `target`, and OmegaConf cannot merge a list onto that mapping."""
    matches = [_TRAIN_LIST.fullmatch(override) for override in overrides]
    return [f"{m[1]}data.train_corpora={m[2]}" if m else override for m, override in zip(matches, overrides)]


@contextlib.contextmanager
def composing(user_dir=None):
    """Hydra initialized on kmt's configs (and a user's directory on top, as `--config-dir` adds it); yields
    `compose(overrides, **options)`. The one place configs are composed outside `kmt-train`'s own `@hydra.main`."""
    from hydra import compose, initialize_config_dir

    register_configs()
    extra = [f"hydra.searchpath=['file://{os.path.abspath(user_dir)}']"] if user_dir is not None else []

    def composed(overrides, **options):
        cfg = compose("config", overrides=[*extra, *aliased(overrides)], **options)
        if OmegaConf.is_interpolation(cfg, "output_dir"):  # ${hydra:runtime.output_dir}: no Hydra job resolves it here
            cfg.output_dir = None
        return cfg

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        yield composed


def compose_config(*overrides: str, config_dir: str | os.PathLike | None = None) -> DictConfig:
    """The config `kmt-train OVERRIDES...` would run with, composed from kmt's `conf/` and validated.

    Args:
        *overrides: str. Hydra overrides, as on the command line (`"experiment=multi30k_en_de"`, `"debug=smoke"`,
            `"trainer.epochs=3"`).
        config_dir: str or path. A directory of your own config files composed on top of kmt's (what `kmt-train
            --config-dir DIR` adds). Defaults to `None`.

    Example:
    >>> cfg = compose_config("debug=smoke", "trainer.epochs=2")
    >>> cfg.trainer.epochs, cfg.data.name
    (2, 'dates')
    """
    if config_dir is not None and not os.path.isdir(config_dir):
        raise ConfigError(f"config_dir={config_dir}: no such directory")
    with composing(config_dir) as compose:
        cfg = compose(list(overrides))
    return validated(cfg)


def validated(cfg):
    """A validated, read-only copy of `cfg`: what a run works from (what a run resolves is recorded apart from it)."""
    validate(cfg)
    cfg = copy.deepcopy(cfg)
    with read_write(cfg):
        cfg.output_dir = None  # a Hydra job's directory, which only that job resolves: kmt.train's run_dir says where
    OmegaConf.set_readonly(cfg, True)
    return cfg


def _check(condition, message):
    if not condition:
        raise ConfigError(message)


def validate(cfg):
    """Checks what the schema's types cannot, naming the key and the value received."""
    job_free = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "output_dir"])  # which a job resolves
    missing = sorted(OmegaConf.missing_keys(job_free))
    _check(not missing, f"{', '.join(missing)} must be set, e.g. {missing[0] if missing else ''}=VALUE")
    # output_dir: null, or ${hydra:runtime.output_dir}, which only the job resolves (older configs lack the key)
    output_dir = None if OmegaConf.is_interpolation(cfg, "output_dir") else cfg.get("output_dir")
    _check(
        output_dir is None,
        f"output_dir is the Hydra job's directory: set hydra.run.dir instead. Received: {output_dir!r}",
    )
    model, data, optim, trainer, decode = cfg.model, cfg.data, cfg.optim, cfg.trainer, cfg.decode
    _check(data.name in DATASETS, f"data.name must be one of {', '.join(DATASETS)}. Received: {data.name!r}")
    for key, seed in (("seed", cfg.seed), ("data.seed", data.seed)):  # what NumPy's generators take
        _check(0 <= seed < 2**32, f"{key} must be in [0, 2**32). Received: {seed}")
    _check(
        not data.tokenized or data.name == "multi30k",
        f"data.tokenized applies to data=multi30k only. Received: data.tokenized=true with data={data.name}",
    )
    _check(data.name != "prepared" or data.path, "data=prepared needs data.path=DIR, a directory made by kmt-prepare")
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
    archs = model_archs()  # kmt.models' registry
    _check(model.arch in archs, f"model.arch must be one of {', '.join(archs)}. Received: {model.arch!r}")
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
    for key, choices in (("activation", ACTIVATIONS), ("position_layout", POSITION_LAYOUTS)):
        _check(model[key] in choices, f"model.{key} must be one of {', '.join(choices)}. Received: {model[key]!r}")
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
    _check(trainer.epochs > 0, f"trainer.epochs must be positive. Received: {trainer.epochs}")
    _check(
        trainer.precision in PRECISIONS,
        f"trainer.precision must be one of {', '.join(PRECISIONS)}. Received: {trainer.precision!r}",
    )
    _check(
        trainer.objective in OBJECTIVES,
        f"trainer.objective must be one of {', '.join(OBJECTIVES)}. Received: {trainer.objective!r}",
    )
    _check(
        trainer.monitor in MONITORS,
        f"trainer.monitor must be one of {', '.join(MONITORS)}. Received: {trainer.monitor!r}",
    )
    _check(
        trainer.monitor != "val_bleu" or trainer.val_bleu,
        "trainer.monitor=val_bleu needs trainer.val_bleu=true (BLEU is only computed each epoch then)",
    )
    _check(trainer.patience >= 0, f"trainer.patience must be >= 0. Received: {trainer.patience}")
    _check(trainer.max_minutes >= 0, f"trainer.max_minutes must be >= 0. Received: {trainer.max_minutes}")
    max_updates = trainer.get("max_updates", 0)  # runs from before the option lack the key
    _check(max_updates >= 0, f"trainer.max_updates must be >= 0. Received: {max_updates}")
    _check(
        data.clean.max_length_ratio == 0 or data.clean.max_length_ratio >= 1,
        f"data.clean.max_length_ratio must be 0 (off) or >= 1. Received: {data.clean.max_length_ratio}",
    )
    _check(
        data.clean.invalid_utf8 in ("error", "drop"),
        f"data.clean.invalid_utf8 must be error or drop. Received: {data.clean.invalid_utf8!r}",
    )
    unset = [f"data.{key}" for key in INHERITED if data[key] is None]
    _check(
        not unset or data.name == "prepared",
        f"{', '.join(unset)} may be null only with data=prepared (which takes them from its directory)",
    )
    if not unset:  # data=prepared: checked with the prepared directory's values when the run starts
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
    _check(
        trainer.keep_checkpoints >= max(1, trainer.average_last),
        "trainer.keep_checkpoints must keep the checkpoints trainer.average_last averages. "
        f"Received: keep_checkpoints={trainer.keep_checkpoints}, average_last={trainer.average_last}",
    )
    for key in ("save_every_updates", "validate_every_updates"):
        _check(trainer[key] >= 0, f"trainer.{key} must be 0 (off) or more. Received: {trainer[key]}")
    validate_decode(decode)


def validate_decode(decode):
    """The `decode` checks, those of `kmt.inference.settings.SearchSettings`, naming the key."""
    from kmt.inference.settings import SearchSettings, SettingsError

    try:
        SearchSettings.from_config(decode)
    except SettingsError as error:
        raise ConfigError(f"decode.{error}") from None
