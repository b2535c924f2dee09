"""A run's checkpoints: find them by name, average the last N, rebuild a model from a run directory."""

import logging
from pathlib import Path

import numpy as np

from kmt.errors import KmtError

logger = logging.getLogger(__name__)


def epoch_checkpoints(run_dir):
    """The run's `checkpoints/epoch_NNN.weights.h5`, oldest first."""
    return sorted((Path(run_dir) / "checkpoints").glob("epoch_*.weights.h5"))


def last_epoch_checkpoints(run_dir, n):
    """The run's last `n` epoch checkpoints, oldest first; a `KmtError` when it has fewer than `n`."""
    paths = epoch_checkpoints(run_dir)
    if len(paths) < n:
        raise KmtError(f"--average {n} needs {n} epoch checkpoints; {Path(run_dir) / 'checkpoints'} has {len(paths)}")
    return paths[-n:]


def find_checkpoint(run_dir, which):
    """`"last"` (newest epoch), `"best"` (the best `trainer.monitor`: lowest val loss by default) or a path -> an
    existing `.weights.h5` path."""
    if which == "best":
        path = Path(run_dir) / "checkpoints" / "best.weights.h5"
    elif which == "last":
        epochs = epoch_checkpoints(run_dir)
        path = epochs[-1] if epochs else Path(run_dir) / "checkpoints" / "epoch_NNN.weights.h5"
    else:
        path = Path(which)
    if not path.is_file():
        raise KmtError(f"no checkpoint at {path}")
    return path


def load_run_model(run_dir, checkpoint="last"):
    """`(cfg, vocabularies, model)` of a run: the model rebuilt from its `config.yaml` and `tokenizer/`, with
    the weights of `checkpoint` (see `find_checkpoint`), uncompiled, in float32."""
    from omegaconf import OmegaConf

    from kmt.build import build_model
    from kmt.config import DecodeConfig
    from kmt.tokenizer import Vocabularies

    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise KmtError(f"{run_dir} is not a kmt run directory (no config.yaml)")
    path = find_checkpoint(run_dir, checkpoint)
    cfg = OmegaConf.load(run_dir / "config.yaml")
    # Onto the schema: a run saved before a decode option existed gets its default, and overrides are type-checked.
    cfg.decode = OmegaConf.merge(OmegaConf.structured(DecodeConfig), cfg.get("decode", {}))
    vocabularies = Vocabularies.load(run_dir / "tokenizer")
    model = build_model(cfg.model, vocabularies.source.vocab_size, vocabularies.target.vocab_size, "float32")
    model.load_weights(path)
    return cfg, vocabularies, model


def average_checkpoints(model, paths):
    """Loads each of `paths` into `model` in turn and leaves `model` holding their element-wise mean
    (Vaswani et al., 2017, section 6.1: the base model averages the last 5 checkpoints, the big one the last 20)."""
    if not paths:
        raise KmtError("no checkpoints to average")
    total = None
    for path in paths:
        model.load_weights(path)
        weights = [np.asarray(w, dtype=np.float64) for w in model.get_weights()]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    model.set_weights([(t / len(paths)).astype(w.dtype) for t, w in zip(total, model.get_weights())])
    logger.info("averaged %d checkpoints: %s", len(paths), ", ".join(p.name for p in paths))
    return model
