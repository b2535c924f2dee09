"""A config's corpus to a prepared directory (`kmt.data.shards`): what `kmt-prepare` runs, and `kmt-train` on raw
text inside its run directory. Needs no TensorFlow."""

import itertools
import logging
from pathlib import Path

from omegaconf import OmegaConf

from kmt.data import load_corpus
from kmt.data.alignments import AlignmentFile
from kmt.data.cleaning import ValidLines
from kmt.data.shards import PreparedData, write_prepared
from kmt.data.sources import ParallelText
from kmt.data.streams import StreamedParallel
from kmt.data.terminology import TermAnnotator
from kmt.errors import ConfigError, DataError
from kmt.inference.glossary import MARKERS, Glossary
from kmt.tokenizer import Vocabularies

logger = logging.getLogger(__name__)


def corpus_streams(data_cfg):
    """`{split: pairs}` for `data_cfg`: files of `data=parallel` are read as they are iterated (a corpus larger than
    memory prepares), the other corpora load whole; `data.limit` keeps the first pairs of each split. With
    `data.clean.invalid_utf8=drop`, training lines that are not UTF-8 are read (for the cleaning to drop and count)."""
    if data_cfg.name == "parallel" and not data_cfg.get("train_corpora"):  # several weighted corpora: mixed in memory
        errors = {"train": "surrogateescape" if data_cfg.clean.invalid_utf8 == "drop" else "strict"}
        corpus = {
            split: StreamedParallel(files.source, files.target, errors.get(split, "strict"))
            for split, files in (("train", data_cfg.train), ("val", data_cfg.val), ("test", data_cfg.test))
            if files.source or files.target or split != "test"
        }
    else:
        corpus = load_corpus(data_cfg)
    if data_cfg.limit:
        corpus = {name: Limited(text, data_cfg.limit) for name, text in corpus.items()}
    return corpus


class Limited:
    """The first `limit` pairs of a corpus split, re-iterable (`data.limit`)."""

    def __init__(self, text, limit):
        if isinstance(text, ParallelText):
            text = ParallelText(text.source[:limit], text.target[:limit], text.source_path, text.target_path)
        self.text, self.limit = text, limit
        self.source = Sliced(text.source, limit)
        self.target = Sliced(text.target, limit)

    def __iter__(self):
        return itertools.islice(pairs_of(self.text), self.limit)


class Sliced:
    def __init__(self, iterable, limit):
        self.iterable, self.limit = iterable, limit

    def __iter__(self):
        return itertools.islice(iter(self.iterable), self.limit)


def pairs_of(text):
    """The `(source, target)` pairs of a `ParallelText` or a `StreamedParallel`."""
    return zip(text.source, text.target) if isinstance(text, ParallelText) else iter(text)


def vocabulary_from(path):
    """The vocabularies in `path`: a tokenizer directory, or a run or prepared directory holding `tokenizer/`."""
    path = Path(path)
    for directory in (path, path / "tokenizer"):
        if Vocabularies.exists(directory):
            return Vocabularies.load(directory)
    raise ConfigError(
        f"data.vocabulary={path}: no vocabulary there (no joint.model or source.model in it or in its tokenizer/)"
    )


def prepare_data(data_cfg, model_cfg, directory, record, vocabularies=None):
    """Prepares the corpus of `data_cfg` (the config's `data`) for the model of `model_cfg` (its `max_length` and
    `shared_embeddings`) into `directory` and returns it read (`PreparedData`); a directory already complete is
    reused as it is. `record` is the config it is prepared with, as YAML, kept in `directory/config.yaml` (a run on
    `data=prepared` takes its batching settings from there). The vocabulary is, in order: `directory/tokenizer` (a
    preparation interrupted after training it), `vocabularies` (a fine-tuning run's source), `data.vocabulary`, else
    trained on the training split. `data.train.alignments` (guided alignment) is read and checked along with the
    training pairs, and their word links kept with them (`kmt.data.alignments`)."""
    directory = Path(directory)
    if (directory / "meta.json").is_file():
        prepared = PreparedData(directory)
        if prepared.max_length != model_cfg.max_length:
            raise DataError(
                f"{directory} was prepared for model.max_length={prepared.max_length}, not "
                f"{model_cfg.max_length}; remove it to prepare again"
            )
        return prepared
    alignments = data_cfg.train.get("alignments")  # runs from before the option lack the key
    alignments = AlignmentFile(alignments, limited=bool(data_cfg.limit)) if alignments else None  # missing: say so now
    terms = term_annotator(data_cfg)
    corpus = corpus_streams(data_cfg)
    if Vocabularies.exists(directory / "tokenizer"):
        vocabularies = Vocabularies.load(directory / "tokenizer")
    elif vocabularies is None and data_cfg.vocabulary:
        vocabularies = vocabulary_from(data_cfg.vocabulary)
        logger.info("using the vocabulary of %s", data_cfg.vocabulary)
    if vocabularies is None:
        options = OmegaConf.to_container(data_cfg.tokenizer)
        source, target = corpus["train"].source, corpus["train"].target
        if data_cfg.clean.invalid_utf8 == "drop":  # the lines read that are not UTF-8 teach the vocabulary nothing
            source, target = ValidLines(source), ValidLines(target)
        if terms is not None:  # the markers are pieces of their own
            options["user_defined_symbols"] = MARKERS
        vocabularies = Vocabularies.train(source, target, joint=model_cfg.shared_embeddings, **options)
    elif vocabularies.joint != model_cfg.shared_embeddings:
        raise ConfigError(
            f"model.shared_embeddings={model_cfg.shared_embeddings} needs "
            f"{'one joint vocabulary' if model_cfg.shared_embeddings else 'a vocabulary per side'}, "
            "and the vocabulary given is not"
        )
    splits = {name: pairs_of(text) for name, text in corpus.items()}
    if terms is not None:
        if not vocabularies.source.holds(MARKERS):
            logger.warning(
                "the vocabulary has no pieces of its own for the terminology markers (%s): they are spelt "
                "in several pieces each",
                " ".join(MARKERS),
            )
        splits["train"] = terms(splits["train"])
    write_prepared(directory, splits, vocabularies, model_cfg.max_length, record, data_cfg.clean, alignments)
    if terms is not None:
        terms.log(data_cfg.terminology.glossary)
    return PreparedData(directory)


def term_annotator(data_cfg):
    """The terminology transform of `data.terminology` (`kmt.data.terminology`), or None when it is off."""
    terminology = data_cfg.get("terminology")  # runs from before the option lack the key
    if not terminology or not terminology.glossary:
        return None
    glossary = Glossary.load(terminology.glossary)
    if not len(glossary):
        raise DataError(f"data.terminology.glossary={terminology.glossary} holds no term")
    return TermAnnotator(glossary, terminology.ratio, data_cfg.seed)
