"""Corpora (generated dates, Multi30k, spa-eng, WMT14 En-De, your own files), their preparation and the batches
training reads."""

from kmt.data.dates import date_splits
from kmt.data.sources import (
    ParallelText,
    load_multi30k,
    load_parallel,
    load_spa_eng,
    mix_corpora,
    read_lines,
    read_parallel,
)
from kmt.data.wmt14 import TRAIN_SETS, wmt14_en_de_files
from kmt.errors import ConfigError


def load_corpus(data_cfg):
    """`{"train", "val", "test"}` -> `ParallelText` for `cfg.data` (test may be absent for `data=parallel`)."""
    train = data_cfg.get("train")
    if data_cfg.get("distilled") and not (train and train.get("target")):
        raise ConfigError(
            "this recipe trains on a teacher's translations of the training sources: give them as "
            "data.train.target=FILE (docs/training.md#distillation)"
        )
    if data_cfg.name == "dates":
        splits = date_splits(data_cfg.num_train, data_cfg.num_val, data_cfg.num_test, data_cfg.seed)
        corpus = {name: ParallelText(list(source), list(target)) for name, (source, target) in splits.items()}
    elif data_cfg.name == "multi30k":
        corpus = load_multi30k(
            data_cfg.dir,
            data_cfg.source_lang,
            data_cfg.target_lang,
            download=data_cfg.download,
            tokenized=data_cfg.get("tokenized", False),  # runs from before the option lack the key
        )
    elif data_cfg.name == "spa_eng":
        corpus = load_spa_eng(
            data_cfg.dir,
            seed=data_cfg.seed,
            val_size=data_cfg.num_val,
            test_size=data_cfg.num_test,
            download=data_cfg.download,
            source_lang=data_cfg.source_lang,
            target_lang=data_cfg.target_lang,
        )
    elif data_cfg.name == "parallel":
        corpora = data_cfg.get("train_corpora")  # runs from before the option lack the key
        splits = {"train": data_cfg.train, "val": data_cfg.val, "test": data_cfg.test}
        if corpora:
            del splits["train"]  # data.train_corpora's files make it
        corpus = load_parallel(
            {
                split: (files.source, files.target) if files.source or files.target else None
                for split, files in splits.items()
            },
            required=("val",) if corpora else ("train", "val"),
        )
        if corpora:
            corpus["train"] = mix_corpora(
                {
                    entry.name or entry.source: (read_parallel(entry.source, entry.target), entry.weight)
                    for entry in corpora
                },
                data_cfg.seed,
            )
    elif data_cfg.name == "wmt14_en_de":
        corpora = data_cfg.train_corpora or [{"name": name, "weight": 1.0} for name in TRAIN_SETS]
        files = wmt14_en_de_files(
            data_cfg.dir,
            data_cfg.source_lang,
            data_cfg.target_lang,
            train=tuple(entry["name"] for entry in corpora),
            download=data_cfg.download,
            mirror=data_cfg.mirror,
        )
        corpus = {split: read_parallel(*files[split]) for split in ("val", "test")}
        corpus["train"] = mix_corpora(
            {entry["name"]: (read_parallel(*files["train"][entry["name"]]), entry["weight"]) for entry in corpora},
            data_cfg.seed,
        )
    else:
        raise ConfigError(
            f"data.name must be dates, multi30k, spa_eng, parallel or wmt14_en_de. Received: {data_cfg.name!r}"
        )
    if data_cfg.name != "parallel" and train is not None and train.get("target"):
        corpus["train"] = retargeted(corpus["train"], train.target, data_cfg.name)
    if data_cfg.limit:
        corpus = {
            name: ParallelText(
                text.source[: data_cfg.limit], text.target[: data_cfg.limit], text.source_path, text.target_path
            )
            for name, text in corpus.items()
        }
    return corpus


def retargeted(train, path, name):
    """The training split `train` of corpus `name` with its targets replaced by the lines of `path`, one a source, in
    order: sequence-level knowledge distillation (Kim & Rush, 2016), the targets a teacher's translations of the
    sources (`data.train.target` on a built-in corpus)."""
    if name == "wmt14_en_de":
        raise ConfigError(
            "data.train.target replaces one corpus's training targets, and data=wmt14_en_de mixes three: give the "
            "distilled pairs as data=parallel's data.train.source and data.train.target"
        )
    return ParallelText(train.source, read_lines(path), f"the {name} training sources", str(path))


__all__ = [
    "ParallelText",
    "load_corpus",
    "load_multi30k",
    "load_parallel",
    "load_spa_eng",
    "mix_corpora",
    "read_parallel",
    "wmt14_en_de_files",
]
