"""Sweeps through Hydra's launcher and sweeper plugins (the `sweep` extra): each job's process, the summary under
every launcher, Optuna's search, the memory freed between jobs, and the one line when a plugin is missing."""

import csv
import json
import os
import re
import subprocess
import sys

import keras
import pytest
from omegaconf import OmegaConf

from kmt.config import composing
from kmt.sweep import FreeMemory, summarize
from tests.helpers import compose_config  # noqa: F401  (registers kmt's config schema)

SMOKE = ("debug=smoke", "trainer.export=false")


# TensorFlow's native start-up lines (kmt/_startup.py), as a process that imports TensorFlow unfiltered writes them:
# Abseil's notice, `I0000 <time> <thread> cudart_stub.cc:31] Could not find cuda drivers ...`, the CPU-instruction
# notice, `E0000 ... cuda_platform.cc:52] failed call to cuInit ...`.
TF_START_UP = re.compile(
    r"absl::InitializeLog|^[IWE]\d{4} [\d:.]+ +\d+ \S+\.cc:\d+\]|oneDNN custom operations"
    r"|cpu_feature_guard|rebuild TensorFlow",
    re.MULTILINE,
)


def _train(*args, timeout=300, native_logs=False):
    """`python -m kmt.cli.train args...` in a process of its own: `(exit status, output, that process's pid)`.
    TensorFlow's native log lines are off (`TF_CPP_MIN_LOG_LEVEL=3`) unless `native_logs`, which leaves the level to
    kmt, as a user gets it."""
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}
    if native_logs:
        del env["TF_CPP_MIN_LOG_LEVEL"]
    process = subprocess.Popen(
        [sys.executable, "-m", "kmt.cli.train", *map(str, args)],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        process.kill()
    return process.returncode, output, process.pid


def _summary(sweep_dir):
    with open(sweep_dir / "summary.csv") as f:
        return list(csv.DictReader(f))


def _markdown_cells(line):
    """The cells of a markdown table row, split at the `|` that are not escaped."""
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _check_markdown_table(path):
    """Every row of the markdown table in `path` has as many cells as its header; returns the rows' cells."""
    header, rule, *rows = path.read_text().splitlines()
    header, cells = _markdown_cells(header), [_markdown_cells(row) for row in rows]
    assert rule.count("|") - 1 == len(header) and [len(row) for row in cells] == [len(header)] * len(rows)
    return header, cells


def _trainer_pid(job_dir):
    return int((job_dir / ".lock").read_text())  # RunLock writes the pid of the process that trains the run


@pytest.mark.e2e
@pytest.mark.parametrize("launcher", ["parallel", "slurm_local"])  # joblib's processes; submitit's local executor
def test_each_job_trains_in_a_process_of_its_own_and_the_sweep_gets_one_summary(tmp_path, launcher):
    status, output, launcher_pid = _train(
        "-m",
        f"hydra/launcher={launcher}",
        "optim.lr_scale=1,2",
        *SMOKE,
        f"hydra.sweep.dir={tmp_path}",
        native_logs=True,
    )
    assert status == 0, output[-3000:]
    assert not TF_START_UP.findall(output), output[-3000:]  # hidden in the jobs' processes as in kmt-train's
    jobs = [tmp_path / "0", tmp_path / "1"]
    assert all((job / "metrics.json").exists() for job in jobs)
    pids = {_trainer_pid(job) for job in jobs}
    assert len(pids) == 2 and launcher_pid not in pids
    rows = _summary(tmp_path)
    assert [(row["job"], row["status"]) for row in rows] == [("0", "ok"), ("1", "ok")]
    assert [row["overrides"].split()[0] for row in rows] == ["optim.lr_scale=1", "optim.lr_scale=2"]
    assert (tmp_path / "summary.png").exists()
    header, cells = _check_markdown_table(tmp_path / "summary.md")
    assert [dict(zip(header, row))["test.bleu_signature"] for row in cells] == [r["test.bleu_signature"] for r in rows]


@pytest.mark.e2e
def test_optuna_search_writes_its_best_parameters_and_the_summary(tmp_path):
    # The recipes' search file, 3 trials at smoke size; Hydra's basic launcher runs them one after another in the
    # launching process, so FreeMemory runs after each.
    status, output, launcher_pid = _train(
        "hparams_search=multi30k_optuna", "hydra.sweeper.n_trials=3", *SMOKE, f"hydra.sweep.dir={tmp_path}"
    )
    assert status == 0, output[-3000:]
    rows = _summary(tmp_path)
    assert [row["status"] for row in rows] == ["ok"] * 3
    results = OmegaConf.load(tmp_path / "optimization_results.yaml")
    space = {"optim.lr_scale", "optim.warmup_steps", "model.dropout", "optim.label_smoothing"}
    assert set(results["best_params"]) == space
    assert results["best_value"] == max(float(row["val.bleu"]) for row in rows)  # maximize the val BLEU
    best = next(row for row in rows if float(row["val.bleu"]) == results["best_value"])
    assert {f"{key}={value}" for key, value in results["best_params"].items()} <= set(best["overrides"].split())
    assert {_trainer_pid(tmp_path / str(job)) for job in range(3)} == {launcher_pid}
    for job in range(3):
        assert f"job {job} ended: Keras state freed (process {launcher_pid})" in output


def test_the_summary_table_keeps_one_cell_per_column_with_sacrebleu_signatures(tmp_path):
    # sacreBLEU's signatures ("nrefs:1|case:mixed|...") hold `|`, which ends a markdown cell unless escaped.
    signature = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
    for job, bleu in enumerate([12.5, 30.25]):
        (tmp_path / str(job)).mkdir()
        (tmp_path / str(job) / "metrics.json").write_text(
            json.dumps({"test": {"bleu": bleu, "bleu_signature": signature}})
        )
    (tmp_path / "2").mkdir()  # a job that failed: no metrics.json
    summarize(tmp_path)
    header, cells = _check_markdown_table(tmp_path / "summary.md")
    assert header == ["job", "overrides", "status", "test.bleu", "test.bleu_signature"]
    assert cells == [
        ["0", "", "ok", "12.5", signature],
        ["1", "", "ok", "30.25", signature],
        ["2", "", "failed", "", ""],
    ]


def test_free_memory_starts_keras_afresh_after_a_job():
    with composing() as compose:
        cfg = compose(["debug=smoke"], return_hydra_config=True)
    assert cfg.hydra.callbacks.free_memory._target_ == "kmt.sweep.FreeMemory"  # what conf/config.yaml registers
    [keras.layers.Dense(1) for _ in range(3)]
    assert keras.layers.Dense(1).name != "dense"
    FreeMemory().on_job_end(cfg)
    assert keras.layers.Dense(1).name == "dense"  # Keras's global state (names, dtype policy) starts over


@pytest.mark.e2e
@pytest.mark.parametrize(
    "choice, plugin, line",
    [
        (
            "hydra/launcher=joblib",
            "hydra_joblib_launcher",
            "hydra/launcher=joblib needs the Hydra plugin hydra-joblib-launcher, which is not installed: "
            'pip install "kmt[sweep]"',
        ),
        (
            "hydra/launcher=slurm",
            "hydra_submitit_launcher",
            "hydra/launcher=slurm needs the Hydra plugin hydra-submitit-launcher, which is not installed: "
            'pip install "kmt[sweep]"',
        ),
        (
            "hparams_search=multi30k_optuna",
            "hydra_optuna_sweeper",
            "hydra/sweeper=optuna needs the Hydra plugin hydra-optuna-sweeper, which is not installed: "
            'pip install "kmt[sweep]"',
        ),
        (
            "hydra/launcher=ray_cluster",
            "hydra_ray_launcher",
            "hydra/launcher=ray_cluster needs the Hydra plugin hydra-ray-launcher, which is not installed: "
            'pip install "kmt[ray]"',
        ),
    ],
)
def test_a_launcher_or_sweeper_without_its_plugin_is_one_line_before_any_data_is_read(tmp_path, choice, plugin, line):
    # The plugin made unimportable (None in sys.modules), as where it was never installed: Hydra's plugin scan
    # then never registers its configs.
    sweep_dir = tmp_path / "sweep"
    code = (
        f"import sys; sys.modules['hydra_plugins.{plugin}'] = None; "
        f"sys.argv = ['kmt-train', '-m', '{choice}', 'debug=smoke', 'hydra.sweep.dir={sweep_dir}']; "
        "from kmt.cli.train import main; main()"
    )
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {line}"]
    assert not sweep_dir.exists()
