"""MkDocs hook: the figures under `bench/results/` become part of the site, where pages can embed them.

Path convention: every `bench/results/NAME.png` is in the site as `results/figures/NAME.png`, a path relative to
the docs root. A page refers to it relative to itself, as to any file of docs/:

    docs/index.md, docs/results.md, docs/performance.md:  ![...](results/figures/dates_curves.png)
    docs/experiments/*.md, docs/reference/*.md:            ![...](../results/figures/NAME.png)

So a figure lives once, in `bench/results/` beside the summaries it comes from, and `mkdocs build --strict`
fails on a page that names a figure `bench/results/` does not hold. Registered in `mkdocs.yml` under `hooks:`.
"""

from pathlib import Path

from mkdocs.structure.files import File

FIGURES = "results/figures"  # where bench/results/*.png appear in the site, relative to the docs root


def on_files(files, config):
    """Adds every `bench/results/*.png` to the site's files as `results/figures/NAME.png`."""
    results = Path(config["config_file_path"]).parent / "bench" / "results"
    for figure in sorted(results.glob("*.png")):
        files.append(File.generated(config, f"{FIGURES}/{figure.name}", abs_src_path=str(figure)))
    return files
