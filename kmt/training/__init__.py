"""`train(cfg, run_dir)`: prepare (config -> vocabulary -> batches -> model), fit (model.fit with the run's
callbacks), finish (save, average, score, export).

Everything the run makes goes under `run_dir` (see `kmt.run_dir` for the layout). The callbacks, one job per
module: `resume` (the resume state), `checkpointing` (epoch and best weights), `logs` (history.csv, learning rate,
throughput, val BLEU), `control` (early stopping, time budget, late dropout, stop signals).
"""

import contextlib
import os
from pathlib import Path

from omegaconf import DictConfig

from kmt import config as config_lib
from kmt.run_dir import RunLock


def train(cfg: DictConfig, run_dir: str | os.PathLike) -> dict | None:
    """Trains (or resumes) a run: prepares the data and model, fits, then saves, averages, scores and exports.

    Args:
        cfg: the run's config (`kmt.compose_config`, or what `kmt-train` composes); read, never changed. What the
            run resolves (the precision, XLA, a prepared directory's batching) is recorded in its `config.yaml`.
        run_dir: the run directory, made if missing; a directory holding a resume state resumes.

    Returns:
        The run's metrics, as in its `metrics.json` (`train`, `val`, `test`, `export`); None on a distributed run's
        workers other than the chief.
    """
    # Imported here, not above: the callbacks modules need no TensorFlow, and the JAX bench imports them without it.
    from kmt.training.distribute import check, quiet_worker, worker
    from kmt.training.finish import finish
    from kmt.training.fit import fit
    from kmt.training.prepare import prepare

    run_dir = Path(run_dir)
    cfg = config_lib.validated(cfg)
    check(cfg.trainer, cfg.data.name)
    chief = not worker(cfg.trainer)
    if not chief:
        quiet_worker()
    # A distributed run's workers share the run directory, which only the chief (process 0) writes and locks.
    with RunLock(run_dir) if chief else contextlib.nullcontext():
        prepared = prepare(cfg, run_dir, verbose=None if chief else 0)
        fitted = fit(prepared.cfg, prepared)
        return finish(prepared.cfg, prepared, fitted)
