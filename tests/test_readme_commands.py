"""The shell commands of README.md and docs/getting-started.md run as written after `kmt-train`.

Each ```bash block is cut into command lines (a trailing backslash joins lines; a `#` comment ends one). They run in
a temporary directory holding one run under runs/dates/ (a copy of the session's `smoke_run`, `kmt-train
debug=smoke`), through the console scripts of pyproject.toml: a `kmt-*` script on PATH for each, written as pip
writes them (`from kmt.cli.X import main`), which imports this checkout's kmt whatever the environment installed.
A line that only sets a variable (`RUN=$(...)`) runs before each later command.

`kmt-train` and `kmt-prepare` lines train or read corpora for minutes: each is composed and validated instead, as
the command does before it starts (`check_overrides`). The others run, except those in NOT_RUN, each with why."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kmt.cli.errors import check_overrides
from tests.helpers import code_blocks

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"]
TRAINS = ("kmt-train", "kmt-prepare")  # validated, not run
# Commands (regular expressions matched against the whole line) that are not run, and why. A key that matches no
# command fails the test, so the table follows the pages.
NOT_RUN = {
    r"python3\.11 -m venv .*": "the install",
    r"python -m pytest( -m e2e)?": "the test suite itself",
    r"kmt-serve .*": "a server, running until stopped (tests/test_serve.py runs it)",
    r"kmt-import Helsinki-NLP/.*": "downloads from the hub (tests/test_marian.py imports a local checkpoint)",
    r"curl .*": "asks the kmt-serve above",
    r"kmt-translate \$RUN/export": "interactive, at a terminal; the line piping echo into it runs",
    r"kmt-export \$RUN --format ctranslate2 .*": "time: tests/test_ctranslate2.py runs this export through the CLI",
    r"kmt-translate \$RUN/ctranslate2_int8 .*": "needs the export above",
}
# What the smoke run cannot do as the default run does, changed in the command lines run here.
SMOKE_EDITS = {"--average 5": "--average 2"}  # the smoke run trained 2 epochs
ASSIGNMENT = re.compile(r"[A-Z_]+=(\$\(.*\)|\S+)")  # `RUN=$(ls -d runs/dates/* | tail -1)`, no command after it


def commands(page):
    """The command lines of `page`'s ```bash blocks, in order."""
    found = []
    for block in code_blocks(page, "bash"):
        joined = re.sub(r"\\\n\s*", "", block)
        found += [
            line.split(" # ")[0].split("  #")[0].strip() for line in joined.splitlines() if not line.startswith("#")
        ]  # an expected output
    return [line for line in found if line]


def program(command):
    """The program a line starts, past any `NAME=value` environment prefix."""
    words = [word for word in command.split() if not ASSIGNMENT.fullmatch(word)]
    return words[0] if words else ""


def shims(directory):
    """A console script for each of pyproject.toml's, as pip writes one, importing this checkout's kmt."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    directory.mkdir()
    for name, target in scripts.items():
        module, function = target.split(":")
        path = directory / name
        path.write_text(
            f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
            f"from {module} import {function}\nsys.exit({function}())\n",
            encoding="utf-8",
        )
        path.chmod(0o755)
    return scripts


@pytest.mark.e2e
def test_the_pages_commands_run_as_written(smoke_run, tmp_path, monkeypatch):
    lines = list(dict.fromkeys(line for page in PAGES for line in commands(page)))  # each once, in order
    scripts = shims(tmp_path / "bin")
    work = tmp_path / "work"
    shutil.copytree(smoke_run, work / "runs" / "dates" / "2026-01-01_12-00-00", ignore=shutil.ignore_patterns(".lock"))
    monkeypatch.chdir(work)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")

    unused = set(NOT_RUN)
    assignments, ran, failures = [], [], []
    for line in lines:
        if ASSIGNMENT.fullmatch(line):
            assignments.append(line)
            continue
        skipped = [key for key in NOT_RUN if re.fullmatch(key, line)]
        unused -= set(skipped)
        if skipped:
            continue
        assert program(line) in scripts or program(line) == "echo", f"a command of no kind known: {line}"
        for old, new in SMOKE_EDITS.items():
            line = line.replace(old, new)
        script = "set -euo pipefail\n" + "\n".join(assignments) + "\n"
        if program(line) in TRAINS:  # what the command checks before it trains, here in this process
            words = f'set -- {line.split(program(line), 1)[1]}; for a; do printf "%s\\0" "$a"; done'  # as bash splits
            split = subprocess.run(["bash", "-c", script + words], capture_output=True, text=True, timeout=600)
            if split.returncode != 0:
                failures.append(f"{line}: bash cannot read it: {split.stderr.strip()}")
                continue
            argv = split.stdout.split("\0")[:-1]
            try:
                check_overrides(argv)
            except SystemExit as error:
                failures.append(f"{line}: its overrides are refused ({error.code})")
            continue
        result = subprocess.run(["bash", "-c", script + line], capture_output=True, text=True, timeout=300)
        ran.append(line)
        if result.returncode != 0 or "Traceback" in result.stderr:
            failures.append(f"{line}: exit {result.returncode}: {result.stderr.strip()[-1500:]}")
    assert not unused, f"NOT_RUN names commands the pages no longer hold: {sorted(unused)}"
    assert not failures, "\n".join(failures)
    assert any("kmt-translate" in line for line in ran) and any("kmt-export" in line for line in ran), ran


@pytest.mark.parametrize(
    "line, program_name",
    [("KERAS_BACKEND=jax kmt-train data=prepared", "kmt-train"), ("echo x | kmt-translate DIR", "echo")],
)
def test_a_line_is_read_as_its_program(line, program_name):
    assert program(line) == program_name
