"""Prepared data (`kmt-prepare`): how fast it trains, how long it takes to make and how big it is, and how much memory
preparing a large corpus takes. Three parts, each printing a table; one JSON line at the end. Nothing is asserted.

    python bench/prepared_data.py                             # all three parts, Multi30k En->De recipe
    python bench/prepared_data.py --parts throughput --steps 40 model=tiny
    python bench/prepared_data.py --parts memory --pairs 200000

throughput: the recipe's training batches through two pipelines into one compiled model (TensorFlow backend), side by
    side in one process: "today" is the tf.data text pipeline training used before prepared data
    (`text_pipeline.make_dataset` over `encode_split` of the train split; with `data.subword_sampling`, its
    `subword_sampler` tokenizes each pass afresh), "prepared" is `kmt.data.batches.Batcher` over the shards of
    `kmt.data.prepared.prepare_data`, through `keras_data` (tf.data), as kmt-train builds it. Both use the same
    vocabulary and start each fit from the same initial weights; each round fits one epoch of each (or `--steps`
    batches), alternating which goes first, after an untimed fit of each. A fit's seconds are building its stream
    (the Batcher draws its first pass's segmentation there) plus `model.fit`'s training (`common.fit_seconds`); tokens
    are the real target tokens of the batches fitted. With subword sampling on, it is measured with and without it.
    The issue's target: prepared / today >= 0.98.
prepare: `python -m kmt.cli.prepare experiment=... OVERRIDES` in a subprocess: its wall time (start-up and
    vocabulary training included), the encoding and writing alone (meta.json's `seconds`), its peak resident memory,
    and the size of the shards (*.ids and *.npy) and of the whole directory.
memory: a synthetic corpus of `--pairs` line-aligned pairs of random words (seeded), prepared with `data=parallel` in a
    subprocess, whose peak resident memory (ru_maxrss) is set against 1 GB, after a row for kmt-prepare's start-up
    alone (`--help`: Python, Keras and its backend). The main figure reuses a
    vocabulary trained on the first `--vocabulary-sample` pairs (itself prepared first, and reported); with
    `--train-vocabulary` the whole corpus is also prepared training its own vocabulary (SentencePiece holds up to 2M
    sentences in memory for that).

The Hydra overrides apply to the throughput and prepare parts, not to the synthetic corpus.
"""

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import (  # noqa: E402
    add_recipe_arguments,
    fit_seconds,
    hardware,
    median,
    print_json,
    print_table,
    recipe_config,
    recipe_model,
    require_positive,
)

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("throughput", "prepare", "memory")
MEMORY_TARGET_MB = 1000  # the 1 GB


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)} (default: all)"
    )
    parser.add_argument("--steps", type=int, default=0, help="throughput: batches a fit at most (default: 0, an epoch)")
    parser.add_argument("--repeats", type=int, default=2, help="throughput: timed rounds (default: 2)")
    parser.add_argument("--pairs", type=int, default=1_000_000, help="memory: synthetic pairs (default: 1,000,000)")
    parser.add_argument(
        "--vocabulary-sample",
        type=int,
        default=50_000,
        help="memory: pairs the reused vocabulary is trained on (default: 50,000)",
    )
    parser.add_argument(
        "--train-vocabulary",
        action="store_true",
        help="memory: also prepare the whole corpus training its own vocabulary",
    )
    add_recipe_arguments(parser)
    args = parser.parse_args(argv)
    require_positive(parser, args, "repeats", "pairs", "vocabulary_sample")
    if args.steps < 0:
        parser.error(f"--steps must be 0 (an epoch) or positive. Received: {args.steps}")
    args.parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    if not args.parts or any(part not in PARTS for part in args.parts):
        parser.error(f"--parts takes {', '.join(PARTS)}. Received: {','.join(args.parts)}")
    return args


# ------------------------------------------------------------------------------------------------------ throughput


def throughput(args, workdir):
    import keras
    import numpy as np
    from omegaconf import OmegaConf

    from kmt.data import load_corpus
    from kmt.data.batches import Batcher, keras_data
    from kmt.data.prepared import prepare_data
    from kmt.training.prepare import subword_sampling
    from text_pipeline import count_batches, encode_split, make_dataset, resample, subword_sampler

    cfg = recipe_config(args.experiment, args.overrides)
    keras.utils.set_random_seed(cfg.seed)  # before the tokenizer: TF's seed reset drops SentencePiece resources
    prepared = prepare_data(cfg.data, cfg.model, workdir / "throughput", OmegaConf.to_yaml(cfg, resolve=True))
    vocabularies, shards, max_length = prepared.vocabularies, prepared.split("train"), cfg.model.max_length
    encoded = encode_split("train", load_corpus(cfg.data)["train"], vocabularies, max_length)
    if len(encoded) != len(shards):
        raise SystemExit(f"the pipelines keep different pairs: {len(encoded)} (today) and {len(shards)} (prepared)")
    batching = dict(max_tokens=cfg.data.max_tokens, batch_size=cfg.data.batch_size, bucket_width=cfg.data.bucket_width)
    variants = {}
    if cfg.data.subword_sampling:
        variants[f"subword sampling (alpha {cfg.data.subword_sampling:g})"] = cfg
    variants["best segmentation"] = OmegaConf.merge(cfg, {"data": {"subword_sampling": 0.0}})
    model, initial = None, None
    rows, report = [], []
    for variant, c in variants.items():
        alpha = c.data.subword_sampling
        epoch = resample(encoded, vocabularies, max_length, alpha, c.seed) if alpha else encoded
        sampling = subword_sampling(alpha, shards, vocabularies)

        def today():
            resegment = subword_sampler(vocabularies, alpha, c.seed) if alpha else None
            return make_dataset(
                encoded,
                max_length,
                **batching,
                pad_to_bucket=c.data.pad_to_bucket,
                shuffle=True,
                seed=c.seed,
                repeat=True,
                resegment=resegment,
            )

        def batcher():
            return Batcher(
                shards, max_length, **batching, fixed_shapes=c.data.pad_to_bucket, seed=c.seed, sampling=sampling
            )

        epoch_steps = {
            "today": count_batches(epoch, max_length, **batching, repeated=True),
            "prepared": batcher().steps_per_pass,
        }
        steps = {name: min(args.steps, n) if args.steps else n for name, n in epoch_steps.items()}
        builds = {"today": today, "prepared": lambda: keras_data(batcher())}
        tokens = {
            "today": sum(int(np.sum(y.numpy() != 0)) for _, y in today().take(steps["today"])),
            "prepared": sum(int(np.sum(y != 0)) for _, y in itertools.islice(batcher().stream(), steps["prepared"])),
        }
        if model is None:
            model = recipe_model(cfg, vocabularies, cfg.trainer.epochs * epoch_steps["prepared"])
            initial = model.get_weights()

        def fit(name, count):
            model.set_weights(initial)
            started = time.perf_counter()
            data = builds[name]()
            return time.perf_counter() - started + fit_seconds(model, data, count)

        for name in builds:  # untimed: traces the step for the batches' shapes
            fit(name, min(steps[name], 20))
        seconds = {name: [] for name in builds}
        for round_ in range(args.repeats):
            for name in list(builds) if round_ % 2 == 0 else list(builds)[::-1]:
                seconds[name].append(fit(name, steps[name]))
                print(
                    f"{variant}, round {round_ + 1}, {name}: {steps[name]} batches in {seconds[name][-1]:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
        speed = {name: tokens[name] / median(values) for name, values in seconds.items()}
        for name in builds:
            rows.append(
                {
                    "variant": variant,
                    "pipeline": name,
                    "epoch_steps": epoch_steps[name],
                    "steps": steps[name],
                    "tokens": tokens[name],
                    "seconds": median(seconds[name]),
                    "tokens_per_second": speed[name],
                    "ratio": speed[name] / speed["today"],
                    "all_seconds": seconds[name],
                }
            )
        report.append({"variant": variant, "ratio": speed["prepared"] / speed["today"]})
    print(
        f"\nthroughput: {args.experiment} {' '.join(args.overrides)}: {len(shards):,} training pairs, "
        f"{cfg.trainer.precision}, {model.count_params():,} parameters, medians of {args.repeats} rounds",
        flush=True,
    )
    print_table(
        rows,
        [
            ("variant", "stream"),
            ("pipeline", "pipeline"),
            ("epoch_steps", "batches an epoch"),
            ("steps", "batches a fit"),
            ("tokens", "target tokens a fit"),
            ("seconds", "s a fit"),
            ("tokens_per_second", "target tok/s"),
            ("ratio", "vs today"),
        ],
    )
    return {
        "training_pairs": len(shards),
        "precision": cfg.trainer.precision,
        "parameters": model.count_params(),
        "rows": rows,
        "ratios": report,
    }


# ------------------------------------------------------------------------------------------ prepare and memory

# Runs a command and writes its peak resident memory (KiB on Linux, bytes on macOS) to a file. Linux keeps a process's
# high-water RSS across exec, so a child forked from this bench (hundreds of MB of TensorFlow and a model) would
# report the bench's own peak; forked from this small launcher, the command's ru_maxrss is its own.
LAUNCHER = """import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)"""


def run_prepare(overrides, directory, log):
    """`python -m kmt.cli.prepare OVERRIDES hydra.run.dir=directory` with this checkout's kmt first on the path:
    `(wall seconds, peak resident MB, meta.json or None)`; `None` as `directory` runs `--help`, which only starts up.
    A failure ends the bench with the log's last line."""
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    arguments = ["--help"] if directory is None else [*overrides, f"hydra.run.dir={directory}"]
    peak_file = f"{log}.peak"
    started = time.perf_counter()
    with open(log, "w") as handle:
        code = subprocess.call(
            [sys.executable, "-c", LAUNCHER, peak_file, sys.executable, "-m", "kmt.cli.prepare", *arguments],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
        )
    seconds = time.perf_counter() - started
    if code:
        lines = Path(log).read_text().strip().splitlines() or ["(no output)"]
        raise SystemExit(f"kmt-prepare {' '.join(arguments)} failed (exit {code}): {lines[-1]}")
    peak = int(Path(peak_file).read_text()) * (1 if sys.platform == "darwin" else 1024) / 1e6
    return seconds, peak, None if directory is None else json.loads((Path(directory) / "meta.json").read_text())


def sizes(directory):
    """Bytes of the shards (*.ids and *.npy) and of every file under `directory`."""
    files = [path for path in Path(directory).rglob("*") if path.is_file()]
    shards = sum(path.stat().st_size for path in files if path.suffix in (".ids", ".npy"))
    return shards, sum(path.stat().st_size for path in files)


def prepare(args, workdir):
    directory = workdir / "prepare"
    seconds, peak, meta = run_prepare(
        [f"experiment={args.experiment}", *args.overrides], directory, workdir / "prepare.log"
    )
    shard_bytes, all_bytes = sizes(directory)
    row = {
        "pairs": ", ".join(f"{name} {entry['pairs']:,}" for name, entry in meta["splits"].items()),
        "seconds": seconds,
        "encode_seconds": meta["seconds"],
        "peak_mb": peak,
        "shard_mib": shard_bytes / 2**20,
        "directory_mib": all_bytes / 2**20,
        "shard_bytes": shard_bytes,
        "directory_bytes": all_bytes,
        "id_dtype": meta["id_dtype"],
    }
    print(f"\nprepare: python -m kmt.cli.prepare experiment={args.experiment} {' '.join(args.overrides)}", flush=True)
    print_table(
        [row],
        [
            ("pairs", "pairs kept"),
            ("seconds", "wall s"),
            ("encode_seconds", "encoding and writing s"),
            ("peak_mb", "peak RSS MB"),
            ("shard_mib", "shards MiB"),
            ("directory_mib", "directory MiB"),
            ("id_dtype", "ids"),
        ],
    )
    return row


def write_corpus(directory, pairs, seed=0, lengths="uniform"):
    """`pairs` line-aligned pairs of random words (a Zipf-like draw from 20,000 made-up words a side), written in
    chunks: `(source path, target path)`. `lengths`: "uniform", 4 to 30 words a sentence; or "news", drawn like news
    text, log-normal with a median of 20 words (mean 23, one in a hundred over 64), 1 to 150 (WMT14 En-De averages
    about 23 words a sentence)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    syllables = np.array([c + v for c in "bdfgklmnprstvz" for v in "aeiou"])
    words = [np.array(["".join(rng.choice(syllables, rng.integers(1, 4))) for _ in range(20_000)]) for _ in range(2)]
    weights = 1 / np.arange(1, 20_001)
    weights /= weights.sum()
    paths = Path(directory) / "synthetic.src", Path(directory) / "synthetic.tgt"
    with open(paths[0], "w") as source, open(paths[1], "w") as target:
        for start in range(0, pairs, 100_000):
            count = min(100_000, pairs - start)
            if lengths == "news":
                counts = np.clip(np.rint(rng.lognormal(np.log(20), 0.5, count)), 1, 150).astype(int)
            else:
                counts = rng.integers(4, 31, count)
            for handle, side, stretch in ((source, words[0], 0), (target, words[1], 2)):
                drawn = side[rng.choice(20_000, int(counts.sum()) + stretch * count, p=weights)]
                ends = np.cumsum(counts + stretch)
                handle.write("".join(" ".join(drawn[end - n - stretch : end]) + "\n" for end, n in zip(ends, counts)))
    return paths


def memory(args, workdir):
    source, target = write_corpus(workdir, args.pairs)
    sample = min(args.vocabulary_sample, args.pairs)
    val = min(1000, args.pairs)
    for name, count in (("sample", sample), ("val", val)):
        for path in (source, target):
            with open(path) as lines, open(f"{path}.{name}", "w") as out:
                out.writelines(line for _, line in zip(range(count), lines))

    def files(split, suffix=""):
        return [f"data.{split}.source={source}{suffix}", f"data.{split}.target={target}{suffix}"]

    common = ["data=parallel", *files("val", ".val")]
    runs = [
        ("sample", "vocabulary sample", sample, "trained here", files("train", ".sample")),
        (
            "whole",
            "whole corpus",
            args.pairs,
            "reused from the sample",
            [*files("train"), f"data.vocabulary={workdir / 'sample'}"],
        ),
    ]
    if args.train_vocabulary:
        runs.append(("whole_trained", "whole corpus", args.pairs, "trained here", files("train")))
    seconds, peak, _ = run_prepare([], None, workdir / "startup.log")
    rows = [
        {
            "corpus": "none (kmt-prepare --help: start-up only)",
            "pairs": 0,
            "vocabulary": "",
            "seconds": seconds,
            "peak_mb": peak,
            "under_1_gb": "yes" if peak < MEMORY_TARGET_MB else "no",
        }
    ]
    for name, corpus, pairs, vocabulary, overrides in runs:
        seconds, peak, meta = run_prepare([*common, *overrides], workdir / name, workdir / f"{name}.log")
        rows.append(
            {
                "corpus": corpus,
                "pairs": pairs,
                "kept": meta["splits"]["train"]["pairs"],
                "vocabulary": vocabulary,
                "seconds": seconds,
                "peak_mb": peak,
                "under_1_gb": "yes" if peak < MEMORY_TARGET_MB else "no",
                "shard_mib": sizes(workdir / name)[0] / 2**20,
            }
        )
        print(
            f"memory: {corpus}, vocabulary {vocabulary}: {seconds:.0f} s, peak {peak:,.0f} MB",
            file=sys.stderr,
            flush=True,
        )
    print(f"\nmemory: data=parallel, {args.pairs:,} synthetic pairs, peak resident memory of kmt-prepare", flush=True)
    print_table(
        rows,
        [
            ("corpus", "corpus"),
            ("pairs", "pairs"),
            ("vocabulary", "vocabulary"),
            ("seconds", "wall s"),
            ("peak_mb", "peak RSS MB"),
            ("under_1_gb", "under 1 GB"),
            ("shard_mib", "shards MiB"),
        ],
    )
    return {"rows": rows}


def main(argv=None):
    args = parse_args(argv)  # before TensorFlow is imported (seconds): --help and usage errors answer at once

    print(f"hardware: {hardware()}", flush=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="kmt_bench_prepared_") as workdir:
        for part in args.parts:
            results[part] = {"throughput": throughput, "prepare": prepare, "memory": memory}[part](args, Path(workdir))
    print_json(
        "prepared_data",
        experiment=args.experiment,
        overrides=args.overrides,
        steps=args.steps,
        repeats=args.repeats,
        pairs=args.pairs,
        **results,
    )


if __name__ == "__main__":
    main()
