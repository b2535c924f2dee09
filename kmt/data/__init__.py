"""Corpora (generated dates, Multi30k, spa-eng, your own files), their preparation and the batches training reads."""

from kmt.data.dates import date_splits
from kmt.data.sources import ParallelText, load_multi30k, load_parallel, load_spa_eng, read_parallel
from kmt.errors import ConfigError


def load_corpus(data_cfg):
    """`{"train", "val", "test"}` -> `ParallelText` for `cfg.data` (test may be absent for `data=parallel`)."""
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
        corpus = load_parallel(
            {
                split: (files.source, files.target) if files.source or files.target else None
                for split, files in (("train", data_cfg.train), ("val", data_cfg.val), ("test", data_cfg.test))
            }
        )
    else:
        raise ConfigError(f"data.name must be dates, multi30k, spa_eng or parallel. Received: {data_cfg.name!r}")
    if data_cfg.limit:
        corpus = {
            name: ParallelText(
                text.source[: data_cfg.limit], text.target[: data_cfg.limit], text.source_path, text.target_path
            )
            for name, text in corpus.items()
        }
    return corpus


__all__ = ["ParallelText", "load_corpus", "load_multi30k", "load_parallel", "load_spa_eng", "read_parallel"]
