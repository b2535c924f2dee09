"""docs/python-api.md runs as written: its ```python blocks, in order, as one script in a fresh process.

The script runs with a temporary directory as its working directory (the guide's `runs/api` goes there) and
KMT_DATA_DIR set (the environment's, else a temporary one), importing this checkout's kmt whatever the environment
installed. It trains a smoke run, translates, exports and evaluates, all without a command."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import code_blocks

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "python-api.md"


def guide_script(page=GUIDE):
    """The page's ```python blocks joined into one script, in order."""
    blocks = code_blocks(page, "python")
    assert blocks, f"{page} holds no ```python block"
    return "\n".join(blocks)


def run_script(script, work, data_dir):
    """Runs `script` with `python` in a fresh process in the directory `work`; returns the CompletedProcess."""
    path = work / "guide.py"
    path.write_text(script, encoding="utf-8")
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = os.environ | {
        "KMT_DATA_DIR": str(data_dir),
        "PYTHONPATH": python_path,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.run([sys.executable, str(path)], cwd=work, env=env, capture_output=True, text=True, timeout=1200)


def test_the_guide_is_python():
    compile(guide_script(), str(GUIDE), "exec")


@pytest.mark.e2e
def test_the_guide_runs_as_written_and_prints_what_it_says(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    data_dir = os.environ.get("KMT_DATA_DIR") or tmp_path / "data"
    result = run_script(guide_script(), work, data_dir)
    assert result.returncode == 0, f"docs/python-api.md's code exits {result.returncode}:\n{result.stderr[-3000:]}"
    assert (work / "runs" / "api").is_dir(), "the guide trained no run into runs/api"
    keras_progress = re.compile(r"Epoch \d+/\d+|\d+/\d+ - ")  # what model.fit prints while kmt.train runs
    lines = [line for line in result.stdout.splitlines() if not keras_progress.match(line)]
    assert len(lines) == 8, result.stdout

    # kmt.train's metrics: the val BLEU, in range, and the export (its path in the run, its size).
    bleu, export = lines[0].split(" ", 1)
    export = ast.literal_eval(export)
    assert 0 <= float(bleu) <= 100 and export["bytes"] > 0, lines[0]
    assert (work / "runs" / "api" / export["path"] / "saved_model.pb").is_file(), lines[0]
    # kmt.load(...).translate: a list of one translation, as Python prints it.
    for line in (lines[1], lines[6]):
        translations = ast.literal_eval(line)
        assert isinstance(translations, list) and len(translations) == 1 and isinstance(translations[0], str), line
    # nbest=2: two hypotheses, best first, each a log-probability score and a text.
    scores = [float(line.split("  ", 1)[0]) for line in lines[2:4]]
    assert all(score <= 0 for score in scores) and scores == sorted(scores, reverse=True), lines[2:4]
    # The prefixed translation starts with its prefix; alignments are (source word, target word) index pairs.
    steered, alignment = lines[4].rsplit(" ((", 1)
    assert steered.startswith("1996-"), lines[4]
    pairs = ast.literal_eval("((" + alignment)
    assert pairs and all(0 <= source < 4 and target >= 0 for source, target in pairs), lines[4]
    [forced] = ast.literal_eval(lines[5])
    assert forced and all(0 <= source < 4 and target == 0 for source, target in forced), lines[5]
    # kmt.evaluate: BLEU, chrF and exact match, each in its range.
    scored = re.fullmatch(r"BLEU ([\d.]+), chrF ([\d.]+), exact match (\d+)%", lines[7])
    assert scored and all(0 <= float(value) <= 100 for value in scored.groups()), lines[7]
