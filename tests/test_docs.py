"""The documentation: README.md stays a short user's page with the commands CI runs, and the MkDocs site builds
with `--strict` (no broken links, missing pages or missing figures)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# The README's three commands, as users (and CI) run them.
INSTALL = 'python3.11 -m venv .venv && . .venv/bin/activate && pip install -e ".[dev]"'
MAIN_JOB = "kmt-train"
TESTS = "python -m pytest"
COMMIT_HASH = re.compile(r"\b[0-9a-f]{7,40}\b", re.IGNORECASE)


def test_mkdocs_builds_strictly(tmp_path):
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (site / "index.html").is_file()
    assert (site / "architecture" / "index.html").is_file()
    # Wide tables and long code lines wrap rather than hide their right-hand side (docs/stylesheets/extra.css).
    assert "stylesheets/extra.css" in (site / "results" / "index.html").read_text(encoding="utf-8")
    assert "pre-wrap" in (site / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    # The hook puts every bench/results/*.png into the site as results/figures/NAME.png.
    figures = sorted(path.name for path in (ROOT / "bench" / "results").glob("*.png"))
    assert figures, "bench/results/ holds no figure"
    for name in figures:
        assert (site / "results" / "figures" / name).is_file(), name


def test_readme_is_short_and_has_no_commit_hashes():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; at most 200"
    hashes = [(number, match.group()) for number, line in enumerate(lines, 1) for match in COMMIT_HASH.finditer(line)]
    assert not hashes, f"README.md lines with a hex string like a commit hash: {hashes}"


def test_guides_have_no_commit_hashes():
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{page.relative_to(ROOT)}:{number}: {m.group()}" for m in COMMIT_HASH.finditer(line)]
    assert not found, "hex strings like commit hashes in docs/: " + ", ".join(found)


def test_readme_has_the_three_commands():
    text = README.read_text(encoding="utf-8")
    blocks = "\n".join(re.findall(r"```bash\n(.*?)```", text, re.DOTALL))
    commands = [line.split("#")[0].strip() for line in blocks.splitlines()]
    for command in (INSTALL, MAIN_JOB, TESTS):
        assert command in commands, f"README.md's code blocks lack the command line {command!r}"


def test_readme_links_resolve():
    text = README.read_text(encoding="utf-8")
    targets = [target for target in re.findall(r"\]\(([^)#\s]+)", text) if "://" not in target]
    assert targets, "README.md links to no page of docs/"
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def _runs_subdir(*overrides, sweep=False):
    """The folder under runs/ that `kmt-train overrides...` writes to: hydra.run.dir (hydra.sweep.dir with `sweep`)
    as Hydra resolves it, less its timestamp."""

    from kmt.config import composing

    with composing() as compose:
        cfg = compose(list(overrides), return_hydra_config=True)
    path = Path(cfg.hydra.sweep.dir if sweep else cfg.hydra.run.dir)
    assert path.parts[0] == "runs", path
    return path.parent.relative_to("runs").as_posix()


def test_a_recipe_runs_under_its_own_name():
    assert _runs_subdir() == "dates"
    assert _runs_subdir("data=multi30k") == "multi30k"
    for recipe in sorted((ROOT / "conf" / "experiment").glob("*.yaml")):
        assert _runs_subdir(f"experiment={recipe.stem}") == recipe.stem
    assert _runs_subdir("experiment=multi30k_en_de", "name=mine") == "mine"


def test_the_run_dirs_the_docs_name_are_where_runs_go():
    """Every `runs/NAME/<time>` in the README, the docs, the commands' --help and the benches is a folder some
    command writes to."""
    made = {_runs_subdir(f"data={data.stem}") for data in (ROOT / "conf" / "data").glob("*.yaml")}
    made |= {_runs_subdir(f"experiment={recipe.stem}") for recipe in (ROOT / "conf" / "experiment").glob("*.yaml")}
    made |= {f"prepared/{name}" for name in made}  # kmt-prepare's runs/prepared/${name}/<time> (kmt/cli/prepare.py)
    made.add(_runs_subdir(sweep=True))
    files = [
        README,
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "kmt").rglob("*.py"),
        *(ROOT / "conf").rglob("*.yaml"),
        *(ROOT / "bench").glob("*.py"),
    ]
    named = re.compile(r"\bruns/(?!prepared/<)((?:prepared/)?\w+)/(?:<|\d{4}-)")  # runs/NAME/<time> or a date
    wrong = sorted(
        {
            f"{path.relative_to(ROOT)}: runs/{name}/"
            for path in files
            for name in named.findall(path.read_text(encoding="utf-8"))
            if name not in made
        }
    )
    assert not wrong, f"run folders no command writes to (commands write to {sorted(made)}): {wrong}"


def test_results_lead_with_their_tables():
    """Results holds the figures a user needs, each with its command and machine; the runs behind them, in prose,
    are in docs/experiments/. Every section leads with its table within a few lines, and no paragraph runs long."""
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    assert sections, "docs/results.md has no section"
    for section in sections:
        lines = section.splitlines()
        title, first_table = lines[0], next((i for i, line in enumerate(lines) if line.startswith("|")), None)
        if "![" in section and first_table is None:  # a figure's section (the default run) shows the figure
            continue
        assert first_table is not None and first_table <= 8, f"section {title!r}: its table comes at line {first_table}"
    paragraphs = [
        p
        for p in re.split(r"\n\s*\n|\n(?=- )", re.sub(r"```.*?```", "", text, flags=re.DOTALL))
        if not p.lstrip().startswith(("|", "!"))
    ]
    long = [p.split("\n")[0][:60] for p in paragraphs if len(p.splitlines()) > 6]
    assert not long, f"docs/results.md paragraphs over 6 lines (the history goes to docs/experiments/): {long}"
    assert len(text.splitlines()) <= 150, f"docs/results.md has {len(text.splitlines())} lines; at most 150"


def test_what_the_readme_writes_in_a_checkout_is_ignored_by_git():
    """The folders and files the README's commands write under the current directory (runs/, kmt-prepare's
    prepared/, outputs inside a run) do not show up as untracked files of the checkout."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    blocks = "\n".join(re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL))
    blocks = "\n".join(line.split(" #")[0] for line in blocks.splitlines())  # less the comments
    written = re.findall(r"(?:--output |> |hydra\.run\.dir=)([^\s/$][^\s]*|\$RUN\S*)", blocks)
    paths = sorted(
        {path.replace("$RUN", "runs/dates/2026-01-01_12-00-00") for path in written if not path.startswith("/")}
        | {"runs/dates/2026-01-01_12-00-00"}
    )  # kmt-train's own
    assert any(path.startswith("prepared/") for path in paths), paths
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    missed = set(paths) - set(result.stdout.split())
    assert not missed, f"paths the README's commands write that .gitignore does not ignore: {sorted(missed)}"
