"""Subword vocabularies: SentencePiece models trained on the training split, run with tensorflow-text ops.

Training, preparing data (`encode`, `kmt-prepare`), the seeded subword sampling of a training stream and decoding
outside TensorFlow (`decode`) use the `sentencepiece` library, so no backend needs TensorFlow to train; the
TensorFlow ops (`tokenize`, `detokenize`) are `tensorflow_text.SentencepieceTokenizer`, a stock tensorflow-text op, so
the very same model runs inside the exported SavedModel. TensorFlow is imported only when those ops are first used.
SentencePiece is reversible (spaces are pieces), so detokenized output is plain text that sacreBLEU can score against
raw references, and with `byte_fallback` a character never seen in training is spelled in UTF-8 bytes instead of
becoming `<unk>`.

Reserved ids, the same in every vocabulary: pad=0, unk=1, start (BOS)=2, end (EOS)=3.

A run keeps its vocabularies in `<run>/tokenizer/`: `joint.model` (+ `joint.vocab`, human-readable) when source
and target share one vocabulary, otherwise `source.model` and `target.model`. An imported Marian vocabulary
(`kmt.importers.marian`) is two SentencePiece models over one shared id space whose source side ends with the end
token; `options.json` says so.
"""

import functools
import hashlib
import io
import itertools
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sentencepiece

from kmt.errors import ConfigError, DataError
from kmt.run_dir import unreadable, write_atomically
from kmt.special_ids import END_ID, PAD_ID, SPECIAL_IDS, START_ID, UNK_ID

logger = logging.getLogger(__name__)

_SAMPLING = threading.Lock()  # see Tokenizer._draw


class Tokenizer:
    """One SentencePiece vocabulary: strings to int32 ids and back, in numpy (`encode`, `decode`) or as TensorFlow ops
    (`tokenize`, `detokenize`).

    Args:
        model_proto: bytes. A serialized SentencePiece model, as written by `train_tokenizer`.
        append_end: bool. End every tokenized string with the end token (`END_ID`), as MarianTokenizer ends a
            source. Defaults to `False` (kmt's own vocabularies: the data pipeline adds start and end to targets).

    Caution: `tf.random.set_seed` (and so `keras.utils.set_random_seed`) clears TensorFlow's eager kernel cache,
    which deletes the SentencePiece resource of every tokenizer made before it. Seed first, then make tokenizers.

    Example:
    >>> tokenizer = train_tokenizer(["a small corpus", "of two lines"], vocab_size=40)  # doctest: +SKIP
    >>> tokenizer.detokenize(tokenizer.tokenize(["small lines"]))  # doctest: +SKIP
    <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'small lines'], dtype=object)>
    """

    def __init__(self, model_proto, append_end=False):
        self.model_proto = model_proto
        self.append_end = append_end
        self._tf_op = None
        self._processor = processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        self.vocab_size = processor.get_piece_size()
        reserved = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if reserved != SPECIAL_IDS:
            raise DataError(f"tokenizer reserves ids {reserved} for pad/unk/start/end; kmt needs {SPECIAL_IDS}")

    @property
    def _op(self):
        """The tensorflow-text op, made on first use (it imports TensorFlow)."""
        if self._tf_op is None:
            import tensorflow as tf
            import tensorflow_text as tf_text

            # The op's name tells its SentencePiece model: a restored SavedModel shares the kernel-owned resource
            # of ops of one name, so with one name a Marian model's target text would be cut by its source model.
            name = f"sentencepiece_{hashlib.sha256(self.model_proto).hexdigest()[:16]}"
            self._tf_op = tf_text.SentencepieceTokenizer(
                model=self.model_proto, out_type=tf.int32, add_eos=self.append_end, name=name
            )
        return self._tf_op

    @property
    def added(self):
        """How many ids `encode` and `tokenize` add to every string: 1 with `append_end`, else 0. A string of no
        more ids than this is empty."""
        return int(self.append_end)

    def encode(self, strings):
        """A list of str -> a list of int32 numpy arrays of ids, no start token and no end token unless `append_end`
        (the best segmentation, the ids `tokenize` gives)."""
        return [np.asarray(ids, np.int32) for ids in self._processor.encode(list(strings), add_eos=self.append_end)]

    def decode(self, rows):
        """Rows of ids (lists or arrays) -> a list of str, as `detokenize`: special ids decode to nothing."""
        return [self._processor.decode([int(i) for i in row if i > END_ID]) for row in rows]

    def tokenize(self, strings):
        """`(N,)` tf.string -> `(N, None)` int32 RaggedTensor of ids, no start token and no end token unless
        `append_end`."""
        return self._op.tokenize(strings)

    def detokenize(self, ids):
        """`(N, L)` int ids (dense or ragged) -> `(N,)` tf.string. Special ids (pad, start, end) decode to nothing."""
        import tensorflow as tf

        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        ids = tf.ragged.boolean_mask(ids, ids > END_ID)  # (N, None): drop pad/unk/start/end ids
        return self._op.detokenize(ids)

    def sampler(self, alpha, seed):
        """A `tokenize` that draws one segmentation of each string instead of the best one: subword regularization
        (Kudo, 2018) over every segmentation of SentencePiece's unigram lattice, with probabilities raised to the
        power `alpha` (1: the model's own; towards 0: towards uniform, so more and shorter pieces).

        Returns `(strings, draw) -> (N, None)` int32 RaggedTensor, for a tf.data map: `strings` is a `(N,)` tf.string
        tensor and `draw` an int64 scalar that numbers the call (a chunk's index in the stream). Each call is `sample`
        seeded from `seed` (a tuple of ints) and `draw` alone, so the same stream draws the same
        segmentations whatever thread runs each call and in whatever order. It runs the `sentencepiece` library
        through `tf.py_function`: tensorflow-text's sampling op draws from a generator that no seed reaches.
        """
        import tensorflow as tf

        def draw(strings, number):
            state = np.random.SeedSequence([*seed, int(number)]).generate_state(1)[0]
            return self._draw([text.decode() for text in strings.numpy()], alpha, int(state))

        def tokenize(strings, number):
            values, lengths = tf.py_function(draw, [strings, number], [tf.int32, tf.int64])
            return tf.RaggedTensor.from_row_lengths(tf.ensure_shape(values, [None]), tf.ensure_shape(lengths, [None]))

        return tokenize

    def sample(self, strings, alpha, seed):
        """`sampler`'s draw for a list of strings, seeded with the int `seed`: `(N, None)` int32 RaggedTensor. The same
        call gives the same ids."""
        import tensorflow as tf

        values, lengths = self._draw(strings, alpha, seed)
        return tf.RaggedTensor.from_row_lengths(values, lengths)

    def draw(self, strings, alpha, seed):
        """One seeded segmentation of `strings` by subword sampling, in numpy: `(values, lengths)`, the flat int32 ids
        and each string's count of them."""
        return self._draw(strings, alpha, seed)

    def _draw(self, strings, alpha, seed):
        # SentencePiece seeds each new thread's generator from one global seed, and a batch `encode` runs on new
        # threads: set the seed and encode under one lock, on one thread (threads would draw in any order).
        with _SAMPLING:
            sentencepiece.set_random_generator_seed(seed)
            ids = self._processor.encode(
                list(strings), enable_sampling=True, alpha=alpha, nbest_size=-1, num_threads=1, add_eos=self.append_end
            )
        values = np.fromiter((i for row in ids for i in row), dtype=np.int32)
        return values, np.array([len(row) for row in ids], dtype=np.int64)

    @functools.cached_property
    def word_starts(self):
        """int8 `(V,)`, what each id is to a whitespace-split word: 1 a piece that begins one (SentencePiece marks
        them with "▁"), 0 a piece that goes on with it (byte pieces and `<unk>` included), -1 a control token (pad,
        start, end), part of no word. Guided alignment maps word links to subwords with it
        (`kmt.data.alignments`)."""
        processor = self._processor
        return np.array(
            [
                -1 if processor.is_control(i) else int(processor.id_to_piece(i).startswith("\u2581"))
                for i in range(self.vocab_size)
            ],
            np.int8,
        )

    @functools.cached_property
    def pieces(self):
        """Every piece, in id order (a CTranslate2 vocabulary)."""
        processor = self._processor
        return tuple(processor.id_to_piece(i) for i in range(self.vocab_size))

    def holds(self, pieces) -> bool:
        """Whether every string of `pieces` is one user-defined piece of this vocabulary (the terminology
        transform's markers, `kmt.data.terminology`)."""
        processor = self._processor
        ids = {piece: processor.piece_to_id(piece) for piece in pieces}
        return all(i != UNK_ID and i in processor.encode(piece) for piece, i in ids.items())

    def id_to_piece(self, ids):
        """Ids to their subword pieces, for logs and attention plots."""
        return self._op.id_to_string(ids)

    def save(self, path):
        """Writes `<path>.model` atomically, and `<path>.vocab` (one `piece<TAB>score` per line) to read."""
        path = Path(path)
        write_atomically(path.with_suffix(".model"), self.model_proto)
        processor = self._processor
        pieces = (f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}" for i in range(self.vocab_size))
        write_atomically(path.with_suffix(".vocab"), "\n".join(pieces) + "\n")

    @classmethod
    def load(cls, path, append_end=False):
        path = Path(path).with_suffix(".model")
        if not path.is_file():
            raise DataError(f"no tokenizer model at {path}")
        try:
            return cls(path.read_bytes(), append_end)
        except DataError:
            raise
        except Exception as error:  # sentencepiece and tensorflow-text refuse a damaged model, each in its words
            raise unreadable(
                path,
                error,
                "training on the same data with the same data.tokenizer settings makes "
                "the same vocabulary: copy a tokenizer/ so made here",
            ) from None


def train_tokenizer(
    sentences,
    vocab_size,
    model_type="unigram",
    character_coverage=1.0,
    byte_fallback=True,
    max_sentences=2_000_000,
    user_defined_symbols=(),
):
    """Trains a SentencePiece model on `sentences` (an iterable of str) and returns a `Tokenizer`.

    Args:
        sentences: the training text, an iterable that can be iterated twice (a list, or lines read from files as
            they come); for a joint vocabulary, both sides of the training split.
        vocab_size: int. Target vocabulary size (a soft limit: a tiny corpus may give fewer pieces).
        model_type: str. `"unigram"` (Kudo, 2018) or `"bpe"` (Sennrich et al., 2016). Defaults to `"unigram"`.
        character_coverage: float. Share of characters the vocabulary must cover. Defaults to `1.0`.
        byte_fallback: bool. Spell unseen characters as UTF-8 byte pieces instead of `<unk>`. Needs
            `vocab_size` > 260. Defaults to `True`.
        max_sentences: int. Sample at most this many sentences for training. Defaults to `2_000_000`.
        user_defined_symbols: strings that are always one piece each, wherever they occur (the terminology
            transform's markers). Defaults to none.
    """
    if model_type not in ("unigram", "bpe"):
        raise ConfigError(f"tokenizer.model_type must be 'unigram' or 'bpe'. Received: model_type={model_type!r}")

    def nonempty():
        return (s for s in sentences if s.strip())

    # Every character kept needs a piece of its own, besides the specials and the 256 byte pieces.
    characters = set()
    for sentence in itertools.islice(nonempty(), max_sentences):
        characters.update(sentence)
    if not characters:
        raise DataError("cannot train a tokenizer: the training split has no non-empty sentence")
    characters = len(characters)
    minimum = len(SPECIAL_IDS) + len(user_defined_symbols) + (256 if byte_fallback else 0) + characters + 1
    if vocab_size < minimum:
        logger.warning(
            "tokenizer.vocab_size=%d cannot hold %d characters%s; using %d",
            vocab_size,
            characters,
            " plus 256 byte pieces" if byte_fallback else "",
            minimum,
        )
        vocab_size = minimum
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=nonempty(),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        byte_fallback=byte_fallback,
        hard_vocab_limit=False,
        input_sentence_size=max_sentences,
        shuffle_input_sentence=True,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=START_ID,
        eos_id=END_ID,
        pad_piece="<pad>",
        user_defined_symbols=list(user_defined_symbols),
        num_threads=os.cpu_count() or 1,
        minloglevel=2,
    )
    tokenizer = Tokenizer(model.getvalue())
    if tokenizer.vocab_size < vocab_size:  # hard_vocab_limit=False: SentencePiece stops where the corpus runs out
        logger.warning(
            "tokenizer.vocab_size=%d is more than the training text fills; capped at %d pieces",
            vocab_size,
            tokenizer.vocab_size,
        )
    logger.info("trained a %s vocabulary of %d pieces", model_type, tokenizer.vocab_size)
    return tokenizer


@dataclass(frozen=True)
class Vocabularies:
    """The source and target tokenizers of a run; one object twice when the vocabulary is joint.

    `shared_ids`: two SentencePiece models, one per side, that give ids in one shared vocabulary (what a Marian
    checkpoint's `source.spm`, `target.spm` and `vocab.json` make once imported): joint for the model (one embedding
    fits both sides), two tokenizers for the text.
    """

    source: Tokenizer
    target: Tokenizer
    shared_ids: bool = False

    @property
    def joint(self):
        """One id space for both sides: one embedding can serve source and target."""
        return self.source is self.target or self.shared_ids

    def save(self, directory):
        directory = Path(directory)
        if self.source is self.target:
            self.source.save(directory / "joint")
        else:
            self.source.save(directory / "source")
            self.target.save(directory / "target")
        options = {"shared_ids": self.shared_ids, "source_appends_end": self.source.append_end}
        if any(options.values()):
            write_atomically(directory / "options.json", json.dumps(options, indent=2) + "\n")

    def same_as(self, other):
        """Whether `other` holds the same vocabularies: byte-identical SentencePiece models, joint or not alike."""
        return (
            self.joint == other.joint
            and self.source.model_proto == other.source.model_proto
            and self.target.model_proto == other.target.model_proto
            and self.source.append_end == other.source.append_end
        )

    @classmethod
    def load(cls, directory):
        directory = Path(directory)
        if (directory / "joint.model").is_file():
            tokenizer = Tokenizer.load(directory / "joint")
            return cls(tokenizer, tokenizer)
        options = {}
        if (directory / "options.json").is_file():
            try:
                options = json.loads((directory / "options.json").read_text(encoding="utf-8"))
            except ValueError as error:
                raise unreadable(directory / "options.json", error, "import the model again") from None
        source = Tokenizer.load(directory / "source", append_end=bool(options.get("source_appends_end")))
        return cls(source, Tokenizer.load(directory / "target"), bool(options.get("shared_ids")))

    @classmethod
    def exists(cls, directory):
        directory = Path(directory)
        return (directory / "joint.model").is_file() or (directory / "source.model").is_file()

    @classmethod
    def train(cls, source_sentences, target_sentences, joint, **options):
        """Trains one joint vocabulary on both sides, or one per side. `options` go to `train_tokenizer`."""
        if joint:
            tokenizer = train_tokenizer(Chained(source_sentences, target_sentences), **options)
            return cls(tokenizer, tokenizer)
        return cls(train_tokenizer(source_sentences, **options), train_tokenizer(target_sentences, **options))


class Chained:
    """Iterables one after the other, re-iterable (a joint vocabulary's text, both sides, without copying them)."""

    def __init__(self, *iterables):
        self.iterables = iterables

    def __iter__(self):
        return itertools.chain.from_iterable(self.iterables)
