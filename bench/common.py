"""What every benchmark in bench/ shares: the machine's name, medians, a markdown table and one JSON line.

Benchmarks print figures measured side by side in one process; nothing here asserts a speed. Each is a command, so
importing this imports `kmt.cli`, which gives every kmt command its quiet start-up (TensorFlow's start-up lines kept
out of the output).
"""

import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import kmt.cli  # noqa: F401  (a command's quiet start-up)


def hardware(cpuinfo=None):
    """`"<cores> x <CPU model>"` from /proc/cpuinfo, or the platform's processor name elsewhere.

    Cloud machines often report a bare family name ("AMD EPYC") for CPUs generations apart (the project's 2-core
    machine has been a Zen 4 and a Zen 5 under that name, 1.54x apart an En->De epoch); where the name holds no
    model number, the CPUID family and model follow it, e.g. "2 x AMD EPYC (family 26, model 2)".
    `cpuinfo` is /proc/cpuinfo's text (read when None).
    """
    model, fields = platform.processor() or "cpu", {}
    try:
        text = Path("/proc/cpuinfo").read_text() if cpuinfo is None else cpuinfo
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first processor's
    if fields.get("model name"):
        model = fields["model name"]
        if not any(char.isdigit() for char in model) and fields.get("cpu family") and fields.get("model"):
            model += f" (family {fields['cpu family']}, model {fields['model']})"
    return f"{cores()} x {model}"


def cores():
    """The CPU cores this process may run on (its affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def peak_rss_mib():
    """This process's peak resident memory so far (`getrusage(RUSAGE_SELF).ru_maxrss`) in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 2**10)  # bytes on macOS, KiB on Linux


def median(values):
    return statistics.median(values)


def percentile(values, q):
    """The q-th percentile (0-100) of `values`, nearest rank."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def timed(fn, *args, **kwargs):
    """Runs `fn(*args, **kwargs)`; returns (result, seconds)."""
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def require_positive(parser, args, *names):
    """Ends the bench with a one-line usage error unless each named integer argument is above zero."""
    for name in names:
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive. Received: {getattr(args, name)}")


def recipe_config(experiment, overrides=()):
    """An experiment's config composed and validated as kmt-train composes it (`overrides` are Hydra overrides);
    `experiment=None` composes kmt-train's default config."""
    from kmt.config import compose_config

    return compose_config(*([f"experiment={experiment}"] if experiment else []), *overrides)


def fit_seconds(model, data, steps):
    """Seconds that `model.fit(data, steps_per_epoch=steps, epochs=1)` spends training its one epoch, as kmt-train
    times its epochs (`kmt.training.logs.TrainingStats`): its steps, and not the teardown after them.

    A clock around the whole call also counts the release of `fit`'s tf.data iterator when it returns, and with
    tf.data autotuning on that sometimes sat idle for 15-17 s on the 2-core AMD EPYC (the main thread joining the
    iterator's autotuning thread, which slept out its period first), which doubled a 20-step bench's step time.
    kmt's pipelines and the benches' streams turn autotuning off (`kmt.data.batches.without_autotune`); the clock
    still leaves the teardown out, so that a stream built any other way cannot skew it.
    """
    from kmt.training.logs import TrainingStats

    stats = TrainingStats(tokens_per_epoch=0)  # only its clock is read
    model.fit(data, steps_per_epoch=steps, epochs=1, shuffle=False, verbose=0, callbacks=[stats])
    return stats.epoch_seconds[0]


def markdown_table(rows, columns):
    """`rows` (a list of dicts) as a markdown table with `columns` (a list of keys, or (key, header) pairs)."""
    columns = [(c, c) if isinstance(c, str) else c for c in columns]
    lines = ["| " + " | ".join(header for _, header in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_format(row.get(key, "")) for key, _ in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def print_table(rows, columns):
    """Prints `markdown_table(rows, columns)`."""
    print(markdown_table(rows, columns), end="")


def print_json(name, **payload):
    """Prints one JSON line `{"benchmark": name, "hardware": ..., **payload}` for scripts to collect."""
    print(json.dumps({"benchmark": name, "hardware": hardware(), **payload}, default=_jsonable))


def _format(value):
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _jsonable(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)
