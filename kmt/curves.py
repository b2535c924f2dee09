"""Learning curves: one or more runs' `logs/history.csv` drawn as one PNG, to look at rather than read.

Three panels against the epoch: training loss (solid) and validation loss (dashed); validation BLEU when a run logged
it (`trainer.val_bleu=true`), else validation token accuracy; the learning rate. Every run keeps one colour.
`kmt-train` writes `logs/curves.png` at the end of a run, a sweep writes `summary.png` beside `summary.md`, and
`kmt-plot` draws any runs side by side, mid-run too.
"""

import csv
from pathlib import Path

from kmt.errors import KmtError


def read_history(run_dir):
    """A run's `logs/history.csv` as `{column: [float or None per epoch]}`, with `epoch` counted from 1."""
    path = Path(run_dir) / "logs" / "history.csv"
    if not path.is_file():
        raise KmtError(f"{path} does not exist; is {run_dir} a kmt-train run directory with a finished epoch?")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    columns = {key: [float(row[key]) if row.get(key) else None for row in rows] for key in (rows[0] if rows else [])}
    columns["epoch"] = [int(row["epoch"]) + 1 for row in rows]
    return columns


def _panels(histories):
    """(title, columns) per panel; a second column is drawn dashed."""
    if any("val_bleu" in h for h in histories.values()):
        second = ("val BLEU (greedy search)", ("val_bleu",))
    else:
        second = ("val token accuracy", ("val_accuracy",))
    return [("loss: train (solid), val (dashed)", ("loss", "val_loss")), second, ("learning rate", ("learning_rate",))]


def plot_curves(histories, path, title=""):
    """Writes the curves of `histories` (`{label: read_history(run)}`) to the PNG `path`; returns `path`. The
    legend names the runs when there are several."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = _panels(histories)
    last = max((max(h["epoch"], default=1) for h in histories.values()), default=1)
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for (name, keys), ax in zip(panels, axes[0]):
        for i, (label, history) in enumerate(histories.items()):
            for key, style in zip(keys, ("-", "--")):
                points = [(e, v) for e, v in zip(history["epoch"], history.get(key, [])) if v is not None]
                if points:
                    ax.plot(*zip(*points), style, color=f"C{i % 10}", marker="." if len(points) < 30 else None,
                            label=label if key == keys[0] else None)
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        ax.set_xlim(0.5, last + 0.5)
        ax.grid(alpha=0.3)
    axes[0][-1].ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    if len(histories) > 1:
        axes[0][0].legend(fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
