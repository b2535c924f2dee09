"""The schema: dataclasses registered in Hydra's ConfigStore, the single source of config names and defaults.

The defaults here are exactly what `kmt-train` runs with no overrides (the dates job: data=dates, model=tiny,
optim=noam, trainer=default, whose files under `conf/` restate nothing); every other option under `conf/` sets only
what differs. Each field's trailing comment is its one-line why; docs/gen_config_reference.py turns them into the
configuration reference. Hydra rejects unknown keys and wrong types against this schema; `kmt.config.validation`
checks what types cannot (ranges, divisibility) before any data is read.
"""

from dataclasses import dataclass, field, make_dataclass

from omegaconf import OmegaConf

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
class TrainFiles(SplitFiles):
    alignments: str | None = None  # guided alignment: a Pharaoh file (`0-0 1-2 ...`, source word - target word) line
    # by line with the training pairs as read, before cleaning (eflomal makes one); trains one cross-attention head to
    # follow it (Garg et al., 2019), so that translations come with word alignments; null: off


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
class TerminologyConfig:
    glossary: str | None = None  # a glossary TSV (source term<TAB>target term): training sources get its terms' target
    # terms inline where the target uses them, so the model learns to copy terms given at translation time (Dinu et
    # al., 2019; kmt.data.terminology); null: off
    ratio: float = 0.5  # the probability that a term found on both sides of a training pair is annotated


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
    train: TrainFiles = field(default_factory=TrainFiles)  # data=parallel: the training pairs' files (any corpus:
    # their word alignments; a built-in corpus's train.target replaces its training targets, line by line: a
    # teacher's translations of its training sources, for sequence-level distillation)
    distilled: bool = False  # the training targets must be a teacher's translations, given as data.train.target (a
    # distillation recipe's)
    val: SplitFiles = field(default_factory=SplitFiles)  # data=parallel: the validation pairs' files
    test: SplitFiles = field(default_factory=SplitFiles)  # data=parallel: optional (no test metrics without them)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)  # the joint subword vocabulary
    train_corpora: list[TrainCorpus] = field(default_factory=list)  # several training corpora, mixed by weight with
    # data.seed, in place of data.train (data=parallel; data=wmt14_en_de lists its three); empty: data.train alone
    mirror: str = ""  # data=wmt14_en_de: a URL (https://, file://) holding the archives under their upstream file
    # names, in place of statmt.org; empty: upstream
    clean: CleanConfig = field(default_factory=CleanConfig)  # what else drops training pairs (each rule counted in
    # the log and meta.json); val and test are kept whole
    terminology: TerminologyConfig = field(default_factory=TerminologyConfig)  # the terminology transform


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
    alignment_layer: int | None = None  # the decoder layer whose cross-attention gives word alignments (negative:
    # from the last); null: the last, the closest of a Multi30k model's layers to eflomal's alignments on val
    alignment_heads: int = 0  # that layer's heads averaged, from the first: 0 all of them; a run with
    # data.train.alignments sets 1, the head it supervised


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
    guided_alignment_weight: float = 0.1  # with data.train.alignments: the loss adds this times the cross-entropy of
    # the supervised head against the alignments (Marian's --guided-alignment-weight default, which OPUS-MT's models
    # trained with; OpenNMT-tf's is 1); 0: the alignments are kept but not trained on


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


def _decode_config():
    """`DecodeConfig`, the `decode` group: made from the search options `kmt.inference.settings` declares once (the
    flags of kmt-export and kmt-translate come from the same list), with their defaults and whys, plus batch_size."""
    from kmt.inference.settings import OPTIONS, SearchSettings

    defaults = SearchSettings().options()
    fields = [(o.name, o.type, field(default=defaults[o.name], metadata={"why": o.why})) for o in OPTIONS if o.config]
    why = "sentences per decoding batch when scoring val/test"
    fields.append(("batch_size", int, field(default=64, metadata={"why": why})))
    made = make_dataclass("DecodeConfig", fields)
    made.__module__ = __name__  # pickled and named as the other groups are
    return made


DecodeConfig = _decode_config()


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
