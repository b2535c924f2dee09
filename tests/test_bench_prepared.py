"""bench/prepared_data.py runs each part end to end at tiny sizes and reports what it measured (its speeds are not
checked: speed lives in benchmarks, not tests)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "prepared_data.py"


def run_bench(*args):
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=SCRIPT.parents[1],
    )


def report_of(result):
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["benchmark"] == "prepared_data" and report["hardware"]
    return report


def test_bad_arguments_are_one_line_usage_errors():
    for args in (["--parts", "throughput,speed"], ["--pairs", "0"], ["--steps", "-1"]):
        result = run_bench(*args)
        assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith("prepared_data.py: error:")


def test_memory_part_prepares_the_synthetic_corpus_with_a_reused_vocabulary():
    report = report_of(run_bench("--parts", "memory", "--pairs", "1500", "--vocabulary-sample", "400"))
    startup, sample, whole = report["memory"]["rows"]
    assert startup["pairs"] == 0 and sample["pairs"] == 400 and whole["pairs"] == 1500
    assert sample["vocabulary"] == "trained here" and whole["vocabulary"] == "reused from the sample"
    assert 0 < whole["kept"] <= 1500 and whole["shard_mib"] > sample["shard_mib"] > 0
    # Measured in the prepare process itself, not inherited from the bench process that started it (which holds
    # TensorFlow, several hundred MB): kmt-prepare imports neither Keras nor TensorFlow.
    assert 0 < startup["peak_mb"] <= sample["peak_mb"] < 300
    for row in report["memory"]["rows"]:
        assert row["peak_mb"] < 4000 and row["under_1_gb"] == ("yes" if row["peak_mb"] < 1000 else "no")


@pytest.mark.skipif(not os.environ.get("KMT_DATA_DIR"), reason="needs the real corpora in $KMT_DATA_DIR")
@pytest.mark.slow
def test_throughput_and_prepare_parts_measure_both_pipelines_on_the_same_pairs():
    report = report_of(
        run_bench(
            "--parts",
            "throughput,prepare",
            "--steps",
            "2",
            "--repeats",
            "1",
            "debug=smoke",
            "data.download=false",
            "data.limit=120",
        )
    )
    rows = report["throughput"]["rows"]
    assert [(row["variant"], row["pipeline"]) for row in rows] == [
        ("subword sampling (alpha 0.5)", "today"),
        ("subword sampling (alpha 0.5)", "prepared"),
        ("best segmentation", "today"),
        ("best segmentation", "prepared"),
    ]
    for row in rows:
        assert row["steps"] == 2 <= row["epoch_steps"] and row["tokens"] > 0 and row["tokens_per_second"] > 0
    assert [r["ratio"] for r in report["throughput"]["ratios"]] == [
        r["ratio"] for r in rows if r["pipeline"] == "prepared"
    ]
    prepared = report["prepare"]
    assert prepared["pairs"].startswith("train ") and 0 < prepared["shard_bytes"] < prepared["directory_bytes"]
