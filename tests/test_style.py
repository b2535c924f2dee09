"""The style tools can check (pyproject.toml's [tool.ruff]): ruff's lint rules and its formatter pass on the repository.

Fix lint findings with `ruff check --fix` (or by hand); format with `ruff format`."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ruff(*args):
    return subprocess.run([sys.executable, "-m", "ruff", *args], capture_output=True, text=True, cwd=ROOT, timeout=600)


def test_ruff_finds_nothing_to_lint():
    result = ruff("check", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_would_change_nothing():
    result = ruff("format", "--check", "--output-format", "concise", ".")
    assert result.returncode == 0, f"run `ruff format` on these files:\n{result.stdout}{result.stderr}"
