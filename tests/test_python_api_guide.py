"""docs/python-api.md runs as written: its ```python blocks, in order, as one script in a fresh process.

The script runs with a temporary directory as its working directory (the guide's `runs/api` goes there) and
KMT_DATA_DIR set (the environment's, else a temporary one), importing this checkout's kmt whatever the environment
installed. It trains a smoke run, translates, exports and evaluates, all without a command."""

import os
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
def test_the_guide_runs_as_written(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    data_dir = os.environ.get("KMT_DATA_DIR") or tmp_path / "data"
    result = run_script(guide_script(), work, data_dir)
    assert result.returncode == 0, f"docs/python-api.md's code exits {result.returncode}:\n{result.stderr[-3000:]}"
    assert (work / "runs" / "api").is_dir(), "the guide trained no run into runs/api"
