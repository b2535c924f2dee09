"""Hydra callbacks for multiruns: the summary of a sweep (one row per job with its overrides and metrics, as CSV,
markdown and a plot), and the framework's memory freed after each job."""

import csv
import gc
import logging
import os
import sys
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from kmt.errors import KmtError
from kmt.run_dir import RunDir

logger = logging.getLogger(__name__)


def _flatten(metrics, prefix=""):
    flat = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def summarize(sweep_dir):
    """Reads every `<sweep_dir>/<job>/metrics.json` and writes `summary.csv` and `summary.md` there, and every
    job's learning curves to `summary.png`, one colour per job, labelled with the overrides that set it apart.

    Returns the rows. A job that failed (no metrics.json) still gets a row, with status "failed".
    """
    # Imported here: kmt.plots imports Keras, and a job's process unpickles these callbacks before kmt-train's module,
    # whose quiet start-up must come first (kmt._startup).
    from kmt.plots import plot_curves, read_history

    sweep_dir = Path(sweep_dir)
    rows = []
    for job in sorted((p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)):
        run = RunDir(job)
        overrides = OmegaConf.load(run.hydra_overrides) if run.hydra_overrides.exists() else []
        row = {"job": int(job.name), "overrides": " ".join(overrides)}
        try:
            metrics = run.read_metrics()
        except KmtError as error:  # the job's metrics.json is damaged: the job counts as failed
            logger.warning("%s", error)
            metrics = None
        if metrics is not None:
            row |= {"status": "ok"} | _flatten(metrics)
        else:
            row["status"] = "failed"
        rows.append(row)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with open(sweep_dir / "summary.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)

    def cell(value):
        text = f"{value:.4g}" if isinstance(value, float) else str(value if value is not None else "")
        return text.replace("|", "\\|")  # sacreBLEU's signatures hold `|`, which would end the cell

    lines = ["| " + " | ".join(map(cell, columns)) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    (sweep_dir / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    shared = set.intersection(*(set(row["overrides"].split()) for row in rows)) if len(rows) > 1 else set()
    histories = {
        f"{row['job']}: {' '.join(o for o in row['overrides'].split() if o not in shared)}".rstrip(": "): read_history(
            sweep_dir / str(row["job"])
        )
        for row in rows
        if RunDir(sweep_dir / str(row["job"])).history.exists()
    }
    if histories:
        plot_curves(histories, sweep_dir / "summary.png", title=f"sweep {sweep_dir.name}")
    return rows


class SweepSummary(Callback):
    """Hydra callback (`hydra.callbacks` in conf/config.yaml): writes the summary when a multirun ends."""

    def on_multirun_end(self, config, **kwargs):
        sweep_dir = Path(config.hydra.sweep.dir)
        if sweep_dir.is_dir():
            rows = summarize(sweep_dir)
            logger.info("sweep summary of %d jobs: %s", len(rows), sweep_dir / "summary.md")


class FreeMemory(Callback):
    """Hydra callback (`hydra.callbacks` in conf/config.yaml): after each job, drops what Keras and its backend keep
    between models (Hydra issue 2631: GPU memory held across the jobs of a multirun).

    Hydra's basic launcher, and the Optuna sweeper through it, run every job in the launching process, and joblib's
    workers take job after job; without this each job's model, optimizer state and compiled functions would stay
    alive into the next one's. `keras.backend.clear_session` starts Keras's global state afresh (layer names, the
    dtype policy, TensorFlow's graph and kernel caches), JAX's compilation caches are cleared, PyTorch's CUDA cache
    emptied, and `gc.collect` releases what the job left behind.
    """

    def on_job_end(self, config, job_return=None, **kwargs):
        if "keras" in sys.modules:  # a job that never got as far as Keras has nothing to free
            import keras

            keras.backend.clear_session(free_memory=True)
        if "jax" in sys.modules:
            sys.modules["jax"].clear_caches()
        if "torch" in sys.modules and sys.modules["torch"].cuda.is_available():
            sys.modules["torch"].cuda.empty_cache()
        gc.collect()
        number = OmegaConf.select(config, "hydra.job.num")
        if number is not None:  # a multirun's job (a single run's process ends here anyway)
            logger.info("job %s ended: Keras state freed (process %d)", number, os.getpid())
