"""Attention scaling: time and peak memory of one self-attention layer and one encoder layer as the sequence
length n grows, against the per-layer cost in Table 1 of the paper (self-attention O(n^2 d), plus the
projections' O(n d^2)).

    python bench/attention_scaling.py                                     # n = 64 ... 4096, d = 256, H = 4
    python bench/attention_scaling.py --lengths 64,128,256 --repeats 2    # a quick look
    python bench/attention_scaling.py --backward --precision bfloat16     # forward + backward, bfloat16 compute

Each (layer, n) runs in a fresh subprocess under the TensorFlow backend, so its peak resident memory is its own:
the memory figure is how far the peak (ru_maxrss) rises from after building the layer and its input to after the
timed calls. Times are the median of --repeats calls of a tf.function, after one warm-up call that traces it.
Dropout is off (training=False). A least-squares fit of time(n) = a n^2 d + b n d^2 + c per layer gives the share
of the n^2 term at each n; the log-log slope between neighbouring lengths tends to 2 once that term dominates.

Prints a markdown table, writes a two-panel PNG (time and memory against n) and prints one JSON line.
"""

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from common import hardware, median, peak_rss_mib, print_json, print_table, timed

KINDS = ("attention", "encoder")
# --precision -> (Keras dtype policy, bytes per attention weight). bfloat16 is the trainer's mixed_bfloat16:
# float32 variables, bfloat16 compute.
PRECISIONS = {"float32": ("float32", 4), "bfloat16": ("mixed_bfloat16", 2)}
MIB = 2**20


def parse_lengths(text):
    try:
        lengths = [int(item) for item in text.split(",")]
    except ValueError:
        lengths = []
    if not lengths or min(lengths) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers. Received: {text!r}")
    return sorted(set(lengths))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--lengths",
        type=parse_lengths,
        default="64,128,256,512,1024,2048,4096",
        help="comma-separated sequence lengths n to time (default: %(default)s)",
    )
    parser.add_argument("--hidden-dim", type=int, default=256, help="model size d = D (default: %(default)s)")
    parser.add_argument(
        "--num-heads", type=int, default=4, help="attention heads H; must divide --hidden-dim (default: %(default)s)"
    )
    parser.add_argument(
        "--intermediate-dim",
        type=int,
        default=1024,
        help="feed-forward inner size d_ff of the encoder layer (default: %(default)s)",
    )
    parser.add_argument("--batch-size", type=int, default=1, help="sequences per call B (default: %(default)s)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="timed calls per (layer, n) after the warm-up; the median is reported (default: %(default)s)",
    )
    parser.add_argument(
        "--backward",
        action="store_true",
        help="time forward + backward (gradients of the summed output with respect to the "
        "layer's weights) instead of the forward pass alone",
    )
    parser.add_argument(
        "--precision",
        choices=sorted(PRECISIONS),
        default="float32",
        help="compute dtype; bfloat16 keeps float32 weights and a float32 softmax, like "
        "trainer.precision=mixed_bfloat16 (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs/bench/attention_scaling.png"),
        help="where the PNG plot goes; its folder is created (default: %(default)s)",
    )
    parser.add_argument(
        "--worker",
        nargs=2,
        metavar=("KIND", "N"),
        help="internal: time one layer kind (attention or encoder) at one length n in this "
        "process and print one JSON line; the main run starts one such process per point",
    )
    args = parser.parse_args(argv)
    if args.hidden_dim % args.num_heads:
        parser.error(
            f"--hidden-dim must be divisible by --num-heads. "
            f"Received: hidden_dim={args.hidden_dim}, num_heads={args.num_heads}"
        )
    if min(args.hidden_dim, args.intermediate_dim, args.batch_size, args.repeats) < 1:
        parser.error(
            "--hidden-dim, --intermediate-dim, --batch-size and --repeats must be positive. "
            f"Received: {args.hidden_dim}, {args.intermediate_dim}, {args.batch_size}, {args.repeats}"
        )
    if args.worker and args.worker[0] not in KINDS:
        parser.error(f"--worker KIND must be one of {', '.join(KINDS)}. Received: {args.worker[0]!r}")
    return args


def measure(kind, length, args):
    """Builds one layer and a random `(B, n, D)` input, times the compiled call; returns ms and memory in MiB."""
    # Imported here: only the worker processes need TensorFlow; the main process fits and plots.
    import keras
    import tensorflow as tf

    from kmt.layers import EncoderLayer, MultiHeadAttention

    policy = PRECISIONS[args.precision][0]
    shape = (args.batch_size, length, args.hidden_dim)  # (B, n, D)
    if kind == "attention":
        layer = MultiHeadAttention(args.num_heads, key_dim=args.hidden_dim // args.num_heads, dtype=policy)
        layer.build(shape, shape)

        def forward(x):
            return layer(x, x, training=False)  # (B, n, D)
    else:
        layer = EncoderLayer(args.hidden_dim, args.num_heads, args.intermediate_dim, dtype=policy)
        layer.build(shape)

        def forward(x):
            return layer(x, training=False)  # (B, n, D)

    def forward_backward(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(forward(x), "float32"))
        return tape.gradient(loss, layer.trainable_variables)

    step = tf.function(forward_backward if args.backward else forward)
    inputs = keras.random.normal(shape, seed=0, dtype=layer.compute_dtype)

    def call():
        return keras.tree.map_structure(keras.ops.convert_to_numpy, step(inputs))  # waits for the result

    before = peak_rss_mib()
    call()  # warm-up: traces and optimises the graph
    seconds = [timed(call)[1] for _ in range(args.repeats)]
    return {"ms": 1000 * median(seconds), "memory_mib": peak_rss_mib() - before}


def run_worker(kind, length, args):
    """Runs `measure` in a fresh process; returns its result, or `{"error": ...}` if the process failed."""
    command = [
        sys.executable,
        __file__,
        "--worker",
        kind,
        str(length),
        "--hidden-dim",
        str(args.hidden_dim),
        "--num-heads",
        str(args.num_heads),
        "--intermediate-dim",
        str(args.intermediate_dim),
        "--batch-size",
        str(args.batch_size),
        "--repeats",
        str(args.repeats),
        "--precision",
        args.precision,
    ] + (["--backward"] if args.backward else [])
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode == 0:
        return json.loads(result.stdout.strip().splitlines()[-1])
    if result.returncode < 0:
        error = f"killed by signal {-result.returncode} (out of memory?)"
    else:
        error = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
    print(f"{kind} n={length} failed: {error}", file=sys.stderr)
    return {"error": error}


def cost_terms(lengths, d):
    """The columns of time(n) = a n^2 d + b n d^2 + c: `(len(lengths), 3)`."""
    n = np.asarray(lengths, dtype=float)
    return np.stack([n**2 * d, n * d**2, np.ones_like(n)], axis=1)


def fit_cost(lengths, ms, d):
    """Least-squares (a, b, c) >= 0 of ms = a n^2 d + b n d^2 + c, in relative error so small n count too.

    Non-negativity by trying every subset of the three terms and keeping the best fit whose coefficients are all
    non-negative (exact for three unknowns).
    """
    terms = cost_terms(lengths, d) / np.asarray(ms, dtype=float)[:, None]  # each row divided by its time
    scale = np.linalg.norm(terms, axis=0)
    terms = terms / scale  # columns of unit norm: n^2 d and 1 differ by ten orders of magnitude
    target = np.ones(len(lengths))
    best, best_error = np.zeros(3), np.inf
    for size in (1, 2, 3):
        for subset in map(list, itertools.combinations(range(3), size)):
            coefficients = np.linalg.lstsq(terms[:, subset], target, rcond=None)[0]
            error = np.sum((terms[:, subset] @ coefficients - target) ** 2)
            if np.all(coefficients >= 0) and error < best_error:
                best, best_error = np.zeros(3), error
                best[subset] = coefficients
    return best / scale


def analyse(points, args):
    """Adds slope and n^2-term share to each kind's measured rows; returns the fitted (a, b, c) per kind."""
    fits = {}
    for kind in KINDS:
        rows = [row for row in points if row["kind"] == kind and "ms" in row]
        if not rows:
            continue
        lengths, ms = [row["n"] for row in rows], [row["ms"] for row in rows]
        fits[kind] = fit_cost(lengths, ms, args.hidden_dim)
        parts = cost_terms(lengths, args.hidden_dim) * fits[kind]  # (len, 3): each term's fitted ms
        for i, row in enumerate(rows):
            row["fit_ms"] = float(parts[i].sum())
            row["n2_share"] = float(parts[i, 0] / parts[i].sum()) if parts[i].sum() > 0 else 0.0
            if i:
                row["slope"] = float(np.log(ms[i] / ms[i - 1]) / np.log(lengths[i] / lengths[i - 1]))
    return fits


def style_length_axes(axes, lengths, ticker):
    """Log axes over sequence length: a tick at each measured n; y labelled 0.5, 1, 20 rather than 5 x 10^-1, with
    minor labels at 2 and 5 too where it spans under 100x; a grid and a legend."""
    for axis in axes:
        axis.set_xticks(lengths, labels=[str(length) for length in lengths])
        axis.xaxis.set_minor_locator(ticker.NullLocator())
        low, high = axis.yaxis.get_view_interval()

        def minor(value, _, low=low, high=high):
            mantissa = round(value / 10 ** math.floor(math.log10(value)))
            return f"{value:g}" if high / low < 100 and mantissa in (2, 5) else ""

        axis.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
        axis.yaxis.set_minor_formatter(ticker.FuncFormatter(minor))
        axis.grid(True, which="both", alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8)


def plot(points, fits, args):
    """Two panels, log-log: time with the fitted curve and an n^2 reference; memory with the attention weights."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    figure, (time_axis, memory_axis) = plt.subplots(1, 2, figsize=(12, 4.8))
    dense = np.geomspace(min(args.lengths), max(args.lengths), 200)
    for kind, color in zip(KINDS, ("tab:blue", "tab:orange")):
        rows = [row for row in points if row["kind"] == kind and "ms" in row]
        if not rows:
            continue
        lengths = np.array([row["n"] for row in rows])
        time_axis.loglog(lengths, [row["ms"] for row in rows], "o", color=color, label=f"{kind}, measured")
        time_axis.loglog(
            dense,
            cost_terms(dense, args.hidden_dim) @ fits[kind],
            "-",
            color=color,
            label=f"{kind}, fit a n²d + b nd² + c",
        )
        memory_axis.loglog(
            lengths, [row["memory_mib"] for row in rows], "o-", color=color, label=f"{kind}, rise of peak RSS"
        )
        if kind == "attention":
            anchor = rows[-1]
            time_axis.loglog(
                dense,
                anchor["ms"] * (dense / anchor["n"]) ** 2,
                ":",
                color="gray",
                label="∝ n² (through the longest attention point)",
            )
    bytes_per_weight = PRECISIONS[args.precision][1]
    memory_axis.loglog(
        dense,
        args.batch_size * args.num_heads * dense**2 * bytes_per_weight / MIB,
        "--",
        color="gray",
        label=f"attention weights B·H·n²·{bytes_per_weight} bytes",
    )
    pass_name = "forward + backward" if args.backward else "forward"
    time_axis.set(xlabel="sequence length n", ylabel=f"median ms per {pass_name}", title="time")
    memory_axis.set(xlabel="sequence length n", ylabel="MiB", title="memory")
    style_length_axes((time_axis, memory_axis), args.lengths, ticker)
    figure.suptitle(
        f"One layer, {pass_name}, {args.precision}: B={args.batch_size}, d={args.hidden_dim}, "
        f"H={args.num_heads}, d_ff={args.intermediate_dim} ({hardware()})",
        fontsize=10,
    )
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=120)
    plt.close(figure)


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        kind, length = args.worker[0], int(args.worker[1])
        print(json.dumps(measure(kind, length, args)))
        return
    bytes_per_weight = PRECISIONS[args.precision][1]
    points = []
    for kind in KINDS:
        for length in args.lengths:
            weights_mib = args.batch_size * args.num_heads * length**2 * bytes_per_weight / MIB
            points.append({"kind": kind, "n": length, **run_worker(kind, length, args), "weights_mib": weights_mib})
    fits = analyse(points, args)
    print_table(
        points,
        [
            ("kind", "kind"),
            ("n", "n"),
            ("ms", "ms"),
            ("slope", "log-log slope"),
            ("memory_mib", "memory MiB"),
            ("weights_mib", "attention weights MiB"),
            ("n2_share", "n² share"),
        ],
    )
    plot(points, fits, args)
    print(f"plot: {args.out}")
    print_json(
        "attention_scaling",
        settings={
            "hidden_dim": args.hidden_dim,
            "num_heads": args.num_heads,
            "intermediate_dim": args.intermediate_dim,
            "batch_size": args.batch_size,
            "repeats": args.repeats,
            "backward": args.backward,
            "precision": args.precision,
        },
        fits={kind: dict(zip(("a", "b", "c"), fit)) for kind, fit in fits.items()},
        rows=points,
        plot=str(args.out),
    )


if __name__ == "__main__":
    main()
