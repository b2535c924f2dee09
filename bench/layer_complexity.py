"""The paper's Table 1 measured: one self-attention layer, one LSTM layer and one 1-D convolution at equal d_model,
as the sequence length n grows.

    python bench/layer_complexity.py                                       # n = 16 ... 4096, d = 256
    python bench/layer_complexity.py --lengths 16 64 256 1024 --repeats 3  # a quicker look

The layers, each mapping `(B, n, d)` to `(B, n, d)` in float32 under the TensorFlow backend: kmt's own
MultiHeadAttention as self-attention (`--num-heads` heads), `keras.layers.LSTM(d, return_sequences=True)` and
`keras.layers.Conv1D(d, k, padding="same")`. Each is timed forward + backward (the gradients of the summed output
with respect to the layer's weights, in one tf.function, traced by a warm-up call first): per length, `--repeats`
rounds call each layer once, the order rotating between rounds, side by side in this process; the median is reported.

Memory is the peak resident memory (CPU RAM) of a layer's first forward + backward call above the resident memory
before it, each (layer, n) in a fresh subprocess: Linux's high-water mark (VmHWM) is reset just before the call
(`/proc/self/clear_refs`). The first call, as TensorFlow keeps the buffers it allocates for later calls (a second
call raises the peak by under 1 MiB); it also counts tracing the graph, a few MiB. TensorFlow reports no allocator
statistics on the CPU.

FLOPs are counted (multiply-add = 2) for the forward pass and tripled for forward + backward (the backward pass
does the forward's matrix products twice, once for the inputs' and once for the weights' gradients):

    self-attention  8 n d^2 (the Q, K, V, output projections) + 4 n^2 d (scores, weighted sum)   Table 1: O(n^2 d)
    LSTM            16 n d^2 (four gates, input and recurrent kernels)                            Table 1: O(n d^2)
    convolution     2 k n d^2                                                                     Table 1: O(k n d^2)

The sequential operations (1, n, 1) and the maximum path length between two positions (1; n - 1 recurrent steps;
log_k n layers of dilated, or (n - 1) / (k - 1) of contiguous convolutions) are Table 1's, counted at each n.
The crossover is the length where self-attention becomes slower than the LSTM, interpolated log-log between the
measured lengths around it; by the FLOP counts above it lies at n = 2d, by Table 1's leading terms at n = d.

Prints a markdown table, writes a two-panel PNG (time and memory against n, log-log) and prints one JSON line.
"""

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from attention_scaling import style_length_axes
from common import hardware, median, print_json, print_table, require_positive, timed

LAYERS = ("self-attention", "LSTM", "convolution")
COLORS = {"self-attention": "tab:blue", "LSTM": "tab:orange", "convolution": "tab:green"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=[16, 64, 256, 1024, 4096],
        metavar="N",
        help="sequence lengths n to time (default: 16 64 256 1024 4096)",
    )
    parser.add_argument("--hidden-dim", type=int, default=256, help="d_model d of every layer (default: %(default)s)")
    parser.add_argument(
        "--num-heads", type=int, default=4, help="self-attention heads; must divide --hidden-dim (default: %(default)s)"
    )
    parser.add_argument("--kernel-size", type=int, default=3, help="convolution kernel width k (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=1, help="sequences per call B (default: %(default)s)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="timed rounds after the warm-up; the median is reported (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs/bench/layer_complexity.png"),
        help="where the PNG plot goes; its folder is created (default: %(default)s)",
    )
    parser.add_argument(
        "--worker",
        nargs=2,
        metavar=("LAYER", "N"),
        help="internal: measure the peak memory of one layer at one length in this process and print "
        "one JSON line; the main run starts one such process per point",
    )
    args = parser.parse_args(argv)
    require_positive(parser, args, "hidden_dim", "num_heads", "batch_size", "repeats")
    if min(args.lengths) < 1:
        parser.error(f"--lengths must be positive. Received: {' '.join(map(str, args.lengths))}")
    if args.kernel_size < 2:
        parser.error(f"--kernel-size must be at least 2. Received: {args.kernel_size}")
    if args.hidden_dim % args.num_heads:
        parser.error(
            f"--hidden-dim must be divisible by --num-heads. "
            f"Received: hidden_dim={args.hidden_dim}, num_heads={args.num_heads}"
        )
    if args.worker and args.worker[0] not in LAYERS:
        parser.error(f"--worker LAYER must be one of {', '.join(LAYERS)}. Received: {args.worker[0]!r}")
    args.lengths = sorted(set(args.lengths))
    return args


def compiled_step(name, length, args):
    """One layer's forward + backward as a tf.function, and a call that runs it on a random `(B, n, d)` input and
    waits for the gradients."""
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import keras
    import tensorflow as tf

    from kmt.layers import MultiHeadAttention

    d = args.hidden_dim
    shape = (args.batch_size, length, d)  # (B, n, D)
    if name == "self-attention":
        layer = MultiHeadAttention(args.num_heads, key_dim=d // args.num_heads)
        layer.build(shape, shape)

        def forward(x):
            return layer(x, x, training=False)  # (B, n, D)
    else:
        layer = (
            keras.layers.LSTM(d, return_sequences=True)
            if name == "LSTM"
            else keras.layers.Conv1D(d, args.kernel_size, padding="same")
        )
        layer.build(shape)

        def forward(x):
            return layer(x)  # (B, n, D)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(forward(x))
        return tape.gradient(loss, layer.trainable_variables)

    inputs = keras.random.normal(shape, seed=0)

    def call():
        return [gradient.numpy() for gradient in step(inputs)]  # waits for the result

    return call


def forward_flops(name, n, args):
    """FLOPs of one forward pass (multiply-add = 2), the formulas of the module docstring."""
    b, d, k = args.batch_size, args.hidden_dim, args.kernel_size
    per_sequence = {
        "self-attention": 8 * n * d**2 + 4 * n**2 * d,
        "LSTM": 16 * n * d**2,
        "convolution": 2 * k * n * d**2,
    }[name]
    return b * per_sequence


def table_one(name, n, args):
    """Table 1's columns at n: the leading complexity term, sequential operations, maximum path length (and, for the
    convolution, the path through contiguous kernels)."""
    d, k = args.hidden_dim, args.kernel_size
    if name == "self-attention":
        return {"table1_term": n**2 * d, "sequential": 1, "path": 1}
    if name == "LSTM":
        return {"table1_term": n * d**2, "sequential": n, "path": max(n - 1, 1)}
    dilated = 1
    while k**dilated < n:  # layers of dilation 1, k, k^2, ...: k^m positions reach each other after m of them
        dilated += 1
    return {
        "table1_term": k * n * d**2,
        "sequential": 1,
        "path": dilated,
        "path_contiguous": max(1, math.ceil((n - 1) / (k - 1))),
    }


def time_side_by_side(args):
    """`{(layer, n): median seconds}`: per length, one warm-up call of each layer, then `--repeats` rounds calling
    each once, rotating which goes first."""
    seconds = {}
    for length in args.lengths:
        calls = {name: compiled_step(name, length, args) for name in LAYERS}
        for call in calls.values():
            call()  # traces and optimises the graph
        samples, order = {name: [] for name in LAYERS}, list(LAYERS)
        for _ in range(args.repeats):
            for name in order:
                samples[name].append(timed(calls[name])[1])
            order = order[1:] + order[:1]
        for name in LAYERS:
            seconds[name, length] = median(samples[name])
        print(
            f"n={length}: " + ", ".join(f"{name} {1000 * seconds[name, length]:.3g} ms" for name in LAYERS),
            file=sys.stderr,
        )
    return seconds


def peak_memory_mib(name, length, args):
    """MiB of peak RSS above the RSS before the first call of one layer, measured in a fresh process; None if that
    failed."""
    if args.worker:
        call = compiled_step(name, length, args)
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current VmRSS
        before = resident_kib("VmRSS")
        call()
        return (resident_kib("VmHWM") - before) / 1024
    command = [
        sys.executable,
        __file__,
        "--worker",
        name,
        str(length),
        "--hidden-dim",
        str(args.hidden_dim),
        "--num-heads",
        str(args.num_heads),
        "--kernel-size",
        str(args.kernel_size),
        "--batch-size",
        str(args.batch_size),
    ]
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        print(f"memory of {name} at n={length} not measured: {last}", file=sys.stderr)
        return None
    return json.loads(result.stdout.strip().splitlines()[-1])["memory_mib"]


def resident_kib(field):
    """`VmRSS` (resident now) or `VmHWM` (its peak) of this process from /proc/self/status, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def crossover(seconds, args):
    """The n from which self-attention stays slower than the LSTM, interpolated log-log between the lengths around
    its last crossing (at the shortest lengths fixed costs may make it slower too); a text says where it lies."""
    gaps = [math.log(seconds["self-attention", n] / seconds["LSTM", n]) for n in args.lengths]
    crossings = [
        (n0, g0, n1, g1) for n0, g0, n1, g1 in zip(args.lengths, gaps, args.lengths[1:], gaps[1:]) if g0 <= 0 < g1
    ]
    if gaps[-1] <= 0:
        return None, f"above n={args.lengths[-1]:,}: self-attention is faster at the longest length measured"
    if not crossings:
        return None, f"below n={args.lengths[0]:,}: self-attention is slower at every length measured"
    n0, g0, n1, g1 = crossings[-1]
    n = round(math.exp(math.log(n0) + (math.log(n1) - math.log(n0)) * -g0 / (g1 - g0)))
    return n, f"n ≈ {n:,} (between {n0:,} and {n1:,})"


def plot(rows, cross, args):
    """Two log-log panels against n: median time, one line per layer, and the rise of peak memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    figure, (time_axis, memory_axis) = plt.subplots(1, 2, figsize=(12, 4.8))
    for name in LAYERS:
        points = [row for row in rows if row["layer"] == name]
        time_axis.loglog(
            [row["n"] for row in points], [row["ms"] for row in points], "o-", color=COLORS[name], label=name
        )
        memory = [(row["n"], row["memory_mib"]) for row in points if row["memory_mib"]]
        if memory:
            memory_axis.loglog(*zip(*memory), "o-", color=COLORS[name], label=name)
    if cross:
        time_axis.axvline(cross, color="gray", linestyle=":", label=f"crossover n ≈ {cross:,}")
    time_axis.set(xlabel="sequence length n", ylabel="median ms, forward + backward", title="time")
    memory_axis.set(xlabel="sequence length n", ylabel="MiB", title="peak resident memory of the first call")
    style_length_axes((time_axis, memory_axis), args.lengths, ticker)
    figure.suptitle(
        f"One layer, float32: B={args.batch_size}, d={args.hidden_dim}, H={args.num_heads}, "
        f"k={args.kernel_size} ({hardware()})",
        fontsize=10,
    )
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=100)
    plt.close(figure)


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        print(json.dumps({"memory_mib": peak_memory_mib(args.worker[0], int(args.worker[1]), args)}))
        return
    seconds = time_side_by_side(args)
    rows = []
    for length in args.lengths:
        for name in LAYERS:
            flops = 3 * forward_flops(name, length, args)
            rows.append(
                {
                    "layer": name,
                    "n": length,
                    "ms": 1000 * seconds[name, length],
                    "memory_mib": peak_memory_mib(name, length, args),
                    "gflops": flops / 1e9,
                    "gflops_per_s": flops / 1e9 / seconds[name, length],
                    **table_one(name, length, args),
                }
            )
    cross, cross_text = crossover(seconds, args)
    print_table(
        rows,
        [
            ("layer", "layer"),
            ("n", "n"),
            ("ms", "ms fwd+bwd"),
            ("memory_mib", "memory MiB"),
            ("gflops", "GFLOP counted"),
            ("gflops_per_s", "GFLOP/s"),
            ("table1_term", "Table 1 term"),
            ("sequential", "sequential ops"),
            ("path", "max path length"),
            ("path_contiguous", "path, contiguous kernels"),
        ],
    )
    print(
        f"\ncrossover, self-attention slower than the LSTM: measured {cross_text}; by the FLOP counts from n = "
        f"{2 * args.hidden_dim:,} (2d), by Table 1's leading terms from n = {args.hidden_dim:,} (d)"
    )
    plot(rows, cross, args)
    print(f"plot: {args.out}")
    print_json(
        "layer_complexity",
        settings={
            "hidden_dim": args.hidden_dim,
            "num_heads": args.num_heads,
            "kernel_size": args.kernel_size,
            "batch_size": args.batch_size,
            "repeats": args.repeats,
            "precision": "float32",
            "memory": "peak RSS (VmHWM) above RSS over the first call, a fresh process per point",
        },
        crossover={"measured": cross, "text": cross_text, "flop_count": 2 * args.hidden_dim, "table1": args.hidden_dim},
        rows=rows,
        plot=str(args.out),
    )


if __name__ == "__main__":
    main()
