"""glibc's mmap threshold beside TensorFlow's generator dataset: whole `kmt-train` runs with kmt's setting and
without it, side by side. Nothing is asserted.

    python bench/malloc_threshold.py                                    # the De->En recipe on 3,000 pairs
    python bench/malloc_threshold.py --experiment multi30k_en_de --pairs 5000 --repeats 3

kmt feeds `model.fit` through `tf.data.Dataset.from_generator`, which tunes glibc's allocator when it starts ("Memory
patch applied: M_TRIM_THRESHOLD=128 kb"); from then on glibc maps a batch's buffers afresh with mmap, page-faults them
in and unmaps them when freed. kmt then sets the mmap threshold to 32 MiB
(`kmt.data.batches.keep_tensor_buffers_on_the_heap`). An allocator's settings hold for a whole process, so each
setting is its own run of the same recipe on the same pairs, for two epochs (the first also traces the step), in a
subprocess: `kmt` as kmt-train runs, and `128 KiB` with `MALLOC_MMAP_THRESHOLD_=131072` in its environment, which
glibc honours and kmt leaves alone: there a 4 MiB buffer is mmapped, as after TensorFlow's patch without kmt's
setting (`tests/test_batches.py`). Repeats alternate which runs first.

Per setting, medians over repeats: the second epoch's training and validation seconds (history.csv's
`epoch_seconds`), and of the whole process (`os.wait4`): minor page faults, the share of its CPU time spent in the
kernel, and its peak resident memory. The ratio is the `128 KiB` epoch's seconds over kmt's.
"""

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import median, print_json, print_table, require_positive

SETTINGS = {"kmt": {}, "128 KiB": {"MALLOC_MMAP_THRESHOLD_": "131072"}}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--experiment", default="multi30k_de_en", help="conf/experiment/ to run (default: multi30k_de_en)"
    )
    parser.add_argument(
        "--pairs", type=int, default=3000, help="training pairs (data.limit; also caps val and test) (default: 3000)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="runs per setting (default: 2)")
    parser.add_argument("overrides", nargs="*", help="more Hydra overrides for kmt-train")
    args = parser.parse_args(argv)
    require_positive(parser, args, "pairs", "repeats")
    return args


def train(setting, args, directory):
    """One `kmt-train` run in a subprocess: `(seconds of epoch 2, minor faults, kernel share, peak RSS MiB)`."""
    command = [
        sys.executable,
        "-m",
        "kmt.cli.train",
        f"experiment={args.experiment}",
        f"data.limit={args.pairs}",
        "trainer.epochs=2",
        "trainer.max_minutes=0",
        "decode.beam_size=1",
        "trainer.verbose=0",
        f"hydra.run.dir={directory}",
        *args.overrides,
    ]
    env = {key: value for key, value in os.environ.items() if key != "MALLOC_MMAP_THRESHOLD_"}
    env |= {"TF_CPP_MIN_LOG_LEVEL": "3", **SETTINGS[setting]}
    log = Path(directory).with_suffix(".log")
    with open(log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:  # the scratch directory goes with the bench: say why here
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        sys.exit(f"error: kmt-train ({setting}) failed: {lines[-1] if lines else 'no output'}")
    with open(Path(directory) / "logs" / "history.csv", newline="") as rows:
        epochs = {int(row["epoch"]): float(row["epoch_seconds"]) for row in csv.DictReader(rows)}
    return (
        epochs[max(epochs)],
        usage.ru_minflt,
        usage.ru_stime / (usage.ru_utime + usage.ru_stime),
        usage.ru_maxrss / 1024,
    )


def main(argv=None):
    args = parse_args(argv)
    runs = {setting: [] for setting in SETTINGS}
    order = list(SETTINGS)
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            for setting in order:
                directory = Path(scratch) / f"{setting.replace(' ', '_')}_{repeat}"
                runs[setting].append(train(setting, args, directory))
                print(f"{setting}, run {repeat + 1}: epoch 2 took {runs[setting][-1][0]:.1f} s", file=sys.stderr)
            order = order[1:] + order[:1]
    rows = []
    for setting, results in runs.items():
        seconds, faults, kernel, rss = (median(column) for column in zip(*results))
        rows.append(
            {
                "setting": setting,
                "epoch_seconds": round(seconds, 1),
                "minor_faults": int(faults),
                "kernel_share": round(kernel, 3),
                "peak_rss_mib": round(rss),
            }
        )
    ratio = rows[1]["epoch_seconds"] / rows[0]["epoch_seconds"]
    print_table(
        rows,
        [
            ("setting", "mmap threshold"),
            ("epoch_seconds", "epoch 2 s"),
            ("minor_faults", "minor faults"),
            ("kernel_share", "kernel CPU share"),
            ("peak_rss_mib", "peak RSS MiB"),
        ],
    )
    print(f"\n128 KiB / kmt epoch seconds: {ratio:.2f}")
    print_json(
        "malloc_threshold",
        experiment=args.experiment,
        pairs=args.pairs,
        repeats=args.repeats,
        overrides=args.overrides,
        results=rows,
        ratio=round(ratio, 3),
    )


if __name__ == "__main__":
    main()
