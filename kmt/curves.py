"""Learning curves: one or more runs' `logs/history.csv` drawn as one PNG, to look at rather than read.

Panels against the epoch: training loss (solid) and validation loss (dashed); perplexity without label smoothing, train
and val, on a log scale, when a run logged it (`ppl`, so runs with different `optim.label_smoothing` compare); validation
BLEU when a run logged it (`trainer.val_bleu=true`), and validation token accuracy when a run did not; the learning
rate. Up to three panels make one row, more two rows. Every run keeps one colour.
`kmt-train` writes `logs/curves.png` at the end of a run, a sweep writes `summary.png` beside `summary.md`, and
`kmt-plot` draws any runs side by side, mid-run too.
"""

import csv
from pathlib import Path

from kmt.errors import KmtError
from kmt.run_dir import RunDir


def read_history(run_dir):
    """A run's `logs/history.csv` as `{column: [float or None per epoch]}`, with `epoch` counted from 1."""
    path = RunDir(run_dir).history
    if not path.is_file():
        raise KmtError(f"{path} does not exist; is {run_dir} a kmt-train run directory with a finished epoch?")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    columns = {key: [float(row[key]) if row.get(key) else None for row in rows] for key in (rows[0] if rows else [])}
    columns["epoch"] = [int(row["epoch"]) + 1 for row in rows]
    return columns


def _logged(history, key):
    return any(value is not None for value in history.get(key, []))


def _panels(histories):
    """(title, columns, log scale) per panel; a second column is drawn dashed."""
    panels = [("loss: train (solid), val (dashed)", ("loss", "val_loss"), False)]
    if any(_logged(history, "val_ppl") for history in histories.values()):
        panels.append(("perplexity, no label smoothing: train, val", ("ppl", "val_ppl"), True))
    bleu = [_logged(history, "val_bleu") for history in histories.values()]
    if any(bleu):
        panels.append(("val BLEU (greedy search)", ("val_bleu",), False))
    if not all(bleu):
        panels.append(("val token accuracy", ("val_accuracy",), False))  # what every run logs
    return panels + [("learning rate", ("learning_rate",), False)]


def plot_curves(histories, path, title="", first_epoch=1):
    """Writes the curves of `histories` (`{label: read_history(run)}`) to the PNG `path`; returns `path`. The
    legend names the runs when there are several. Only epochs `first_epoch` onwards are drawn, the y axes scaled to
    them, so that the first epochs' losses do not flatten late differences between runs."""
    import matplotlib.pyplot as plt

    figure = draw_curves(histories, title, first_epoch)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def draw_curves(histories, title="", first_epoch=1):
    """The matplotlib figure `plot_curves` saves. Raises `KmtError` when `first_epoch` is past every run's last."""
    last = max((max(h["epoch"], default=1) for h in histories.values()), default=1)
    if first_epoch > last:
        raise KmtError(f"--from-epoch {first_epoch} is past every run's last epoch ({last})")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogFormatter, MaxNLocator

    panels = _panels(histories)
    rows, columns = (1, len(panels)) if len(panels) <= 3 else (2, (len(panels) + 1) // 2)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.8 * rows), squeeze=False)
    axes = axes.ravel()
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    for (name, keys, log_scale), ax in zip(panels, axes):
        for i, (label, history) in enumerate(histories.items()):
            for key, style in zip(keys, ("-", "--")):
                points = [(e, v) for e, v in zip(history["epoch"], history.get(key, []))
                          if v is not None and e >= first_epoch]
                if points:
                    ax.plot(*zip(*points), style, color=f"C{i % 10}", marker="." if len(points) < 30 else None,
                            label=label if key == keys[0] else None)
        ax.set_title(name)
        if log_scale:
            ax.set_yscale("log")  # an untrained model's perplexity is in the thousands, a trained one's near 5
            ax.yaxis.set_major_formatter(LogFormatter())  # 4 and 1000, not 4 x 10^0 and 10^3
            ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        ax.set_xlim(first_epoch - 0.5, last + 0.5)
        ax.grid(alpha=0.3)
    axes[len(panels) - 1].ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))  # the learning rate
    if len(histories) > 1:  # every run, also one with nothing to draw in the first panel
        handles = [Line2D([], [], color=f"C{i % 10}", label=label) for i, label in enumerate(histories)]
        axes[0].legend(handles=handles, fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure
