"""Plots, to look at rather than read: learning curves of runs, cross-attention heatmaps of translations, and the
sinusoidal position table.

Learning curves: one or more runs' `logs/history.csv` drawn as one PNG. Panels against the epoch: training loss (solid)
and validation loss (dashed); perplexity without label smoothing, train and val, on a log scale, when a run logged it
(`ppl`, so runs with different `optim.label_smoothing` compare); validation BLEU when a run logged it
(`trainer.val_bleu=true`), and validation token accuracy when a run did not; the learning rate. Up to three panels
make one row, more two rows. Every run keeps one colour. `kmt-train` writes `logs/curves.png` at the end of a run, a
sweep writes `summary.png` beside `summary.md`, and `kmt-plot` draws any runs side by side, mid-run too.

Cross-attention heatmaps (`kmt-translate --attention-plots`): which source pieces each output piece attended to, per
layer and head (the paper's figures 3-5 show such maps for self-attention; for translation the encoder-decoder maps
show the alignment).

The position table (`kmt-plot positions`): a few of its columns against the position, and the whole table as a
heatmap, as the paper's sources draw it.
"""

import csv
import logging
from pathlib import Path

import numpy as np
from keras import ops

from kmt.errors import KmtError
from kmt.inference.decoding import search_ids
from kmt.layers.masks import target_attention_mask
from kmt.run_dir import RunDir
from kmt.special_ids import END_ID, START_ID

logger = logging.getLogger(__name__)


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


def run_title(run_dir):
    """The title kmt-train gives a run's `logs/curves.png`: the config's name and the run directory's, as
    `dates: 2026-01-01_12-00-00`; "" for a directory without a readable config.yaml."""
    from omegaconf import OmegaConf

    run = RunDir(run_dir)
    try:
        name = OmegaConf.load(run.config).get("name")
    except Exception:  # no config.yaml, or one that does not read: the curves are drawn without the title
        return ""
    return curves_title(name, run.root) if name else ""


def curves_title(name, run_dir):
    """A run's curves' title: its config's `name` and its directory's, as `dates: 2026-01-01_12-00-00`."""
    return f"{name}: {Path(run_dir).resolve().name}"


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
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for (name, keys, log_scale), ax in zip(panels, axes):
        for i, (label, history) in enumerate(histories.items()):
            for key, style in zip(keys, ("-", "--")):
                points = [
                    (e, v) for e, v in zip(history["epoch"], history.get(key, [])) if v is not None and e >= first_epoch
                ]
                if points:
                    ax.plot(
                        *zip(*points),
                        style,
                        color=f"C{i % 10}",
                        marker="." if len(points) < 30 else None,
                        label=label if key == keys[0] else None,
                    )
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


def cross_attention_weights(model, source_ids, output_ids):
    """Teacher-forced pass over one sentence pair: a list (one per decoder layer) of `(H, T, S)` weights.

    `model` is a `kmt.models.Transformer` (its decoder layers' cross-attention); `source_ids` and `output_ids` are
    1-D int sequences without start/end tokens; row t of each map is the attention of the step that predicted
    `output_ids[t]` (and the final row, the end token).
    """
    source = ops.convert_to_tensor([list(source_ids)], "int32")  # (1, S)
    target_in = ops.convert_to_tensor([[START_ID, *output_ids]], "int32")  # (1, T)
    encoder_outputs, source_mask = model.encode(source)
    states = model.target_embedding(target_in)
    self_mask = target_attention_mask(target_in)
    maps = []
    for layer in model.decoder_layers:
        states, weights = layer(
            states,
            encoder_outputs,
            self_attention_mask=self_mask,
            cross_attention_mask=source_mask,
            return_attention_scores=True,
        )
        maps.append(ops.convert_to_numpy(weights)[0])  # (H, T, S)
    return maps


def plot_cross_attention(maps, source_pieces, target_pieces, path, title=""):
    """Writes one PNG: a row of heatmaps (one per head) for each decoder layer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers, heads = len(maps), maps[0].shape[0]
    width = max(2.5, 0.28 * len(source_pieces) + 1.2)
    height = max(2.0, 0.25 * len(target_pieces) + 1.0)
    figure, axes = plt.subplots(layers, heads, figsize=(width * heads, height * layers), squeeze=False)
    for layer, layer_maps in enumerate(maps):
        for head in range(heads):
            axis = axes[layer][head]
            axis.imshow(layer_maps[head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            axis.set_xticks(range(len(source_pieces)), source_pieces, rotation=90, fontsize=7)
            axis.set_yticks(range(len(target_pieces)), target_pieces, fontsize=7)
            axis.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
    if title:
        figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def save_attention_plots(model, vocabularies, sentences, directory, max_length=None):
    """Greedy-translates each sentence and writes `attention_<i>.png` into `directory`; returns the paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    max_length = max_length or model.max_length
    paths = []
    for i, sentence in enumerate(sentences):
        source_ids = vocabularies.source.tokenize([sentence]).to_list()[0][:max_length]
        if not source_ids:
            continue
        tokens, _ = search_ids(model, np.array([source_ids], "int32"))
        output = [int(t) for t in ops.convert_to_numpy(tokens)[0] if t > END_ID]
        maps = cross_attention_weights(model, source_ids, output)
        source_pieces = _pieces(vocabularies.source, source_ids)
        target_pieces = _pieces(vocabularies.target, output) + ["</s>"]
        translation = vocabularies.target.detokenize(np.array([output or [0]], "int32")).numpy()[0].decode()
        path = directory / f"attention_{i}.png"
        plot_cross_attention(maps, source_pieces, target_pieces, path, title=f"{sentence}  ->  {translation}")
        paths.append(path)
        logger.info("wrote %s", path)
    return paths


def _pieces(tokenizer, ids):
    return [piece.decode("utf-8", "replace") for piece in tokenizer.id_to_piece(np.array(ids, "int32")).numpy()]


def plot_positions(length, depth, path):
    """Writes kmt's sinusoidal position table (`kmt.layers.embedding.positional_encoding`) to the PNG `path` as two
    panels, the figures of the paper's sources; returns `path`. Left: a few columns against the position, the sine
    and cosine of the second-fastest pair (the fastest, of wavelength 2*pi, looks jagged at integer positions) and
    the sines of slower pairs, whose wavelengths grow geometrically towards 2*pi*10000. Right: the whole
    `(length, depth)` table as a heatmap, position down, feature across.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kmt.layers.embedding import positional_encoding

    table = ops.convert_to_numpy(positional_encoding(length, depth))  # (length, depth)
    pairs = depth // 2
    columns = sorted({min(2, depth - 2), min(3, depth - 1), 2 * (pairs // 4), 2 * (pairs // 2)})
    figure, (curves, heatmap) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    for column in columns:
        kind = "sin" if column % 2 == 0 else "cos"
        wavelength = 2 * np.pi * 10000 ** (column // 2 * 2 / depth)
        curves.plot(table[:, column], label=f"column {column}: {kind}, wavelength {wavelength:.3g}")
    curves.set(xlabel="position", ylabel="PE(position, column)", title="columns against position")
    curves.set_ylim(-1.1, 1.6)  # room for the legend above the curves
    curves.legend(fontsize="small", loc="upper center", ncol=2)
    curves.grid(alpha=0.3)
    image = heatmap.imshow(table, cmap="RdBu", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    heatmap.set(xlabel="column (sin at even, cos at odd)", ylabel="position", title=f"the table, {length} x {depth}")
    figure.colorbar(image, ax=heatmap)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
