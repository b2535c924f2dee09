"""Multi30k on an accelerator that has JAX and no TensorFlow: prepared here, trained there, exported and scored here,
each step by kmt's own command; this script adds the figures a GPU run is reported with.

    python bench/multi30k_jax.py prepare en_de --out .gpu/en_de [overrides]     # here
    KERAS_BACKEND=jax python bench/multi30k_jax.py train .gpu/en_de --out OUT [overrides]   # on the accelerator
    python bench/multi30k_jax.py finish OUT                                     # here: export, scores, results row

`prepare` is `kmt-prepare experiment=multi30k_<direction> [overrides] hydra.run.dir=DIR`. `train` is `kmt-train` with
the preparation's overrides, `data=prepared data.path=DIR hydra.run.dir=OUT` and the overrides given (OUT is the run
directory: it checkpoints, averages and scores val and test as any run; run again, it resumes). It then prints, from
OUT's history.csv and metrics.json, target tokens/s over the epochs after the first (which compiles), the seconds an
epoch takes, and the model FLOPs utilization (MFU) against the chip's dense bf16 peak, estimating the FLOPs of a
target token as 6 x parameters (forward and backward through every weight once; attention's length term, the source
side's share and the embedding lookups are not counted apart), and writes them to OUT/bench.json. `finish` makes the
SavedModel with kmt-export (of the average the run scored) unless the run made it, scores val and test_2016_flickr
through it with kmt-evaluate against $KMT_DATA_DIR/multi30k, and prints the results row (added to OUT/bench.json).

Under XLA each batch shape compiles once: the En->De recipe's `data.bucket_width=1` makes one shape per length, where
`data.bucket_width=0` makes about a dozen. Several jobs on one GPU each need `XLA_PYTHON_CLIENT_MEM_FRACTION` (JAX
takes 75% of the GPU's memory per process by default; 0.2 each for four jobs). The training machine needs this
repository on PYTHONPATH (the commands put it there) and keras, hydra-core, omegaconf, sentencepiece, sacrebleu, h5py
and matplotlib beside JAX.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Dense bf16 peaks (FLOP/s, without sparsity) by a part of JAX's `device_kind`; the first match counts.
PEAK_BF16 = (("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("A100", 312e12), ("L4", 121e12))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    prepare = commands.add_parser("prepare", help="kmt-prepare a direction's recipe into --out")
    prepare.add_argument("direction", choices=["en_de", "de_en"])
    train = commands.add_parser("train", help="kmt-train from a `prepare` directory into --out; print its speed")
    train.add_argument("prepared", type=Path, help="a directory `prepare` wrote")
    for command in (prepare, train):
        command.add_argument("--out", type=Path, required=True, help="the directory to write (prepared data; a run)")
        command.add_argument("overrides", nargs="*", help="Hydra overrides, as for kmt-train")
    finish = commands.add_parser("finish", help="export and score a run `train` wrote; print the results row")
    finish.add_argument("run_dir", type=Path, help="the run directory (`train --out`)")
    args, extra = parser.parse_known_args(argv)  # overrides after --out too
    if extra and (args.command == "finish" or any(arg.startswith("-") for arg in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides = [*getattr(args, "overrides", []), *extra]
    return args


def kmt(command, *args, capture=False, env=None):
    """`python -m kmt.cli.<command> args` (this repository on PYTHONPATH); its stdout if `capture`; exits on failure."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", f"kmt.cli.{command}", *map(str, args)],
        text=True,
        capture_output=capture,
        env=os.environ | {"PYTHONPATH": path} | (env or {}),
    )
    if result.returncode:
        sys.stderr.write(result.stderr or "")
        sys.exit(result.returncode)
    return result.stdout


def prepare(args):
    kmt("prepare", f"experiment=multi30k_{args.direction}", *args.overrides, f"hydra.run.dir={args.out}")


def train(args):
    import jax  # only asked for the device's kind once the run is done
    from omegaconf import OmegaConf

    recorded = args.prepared / ".hydra" / "overrides.yaml"
    if not (args.prepared / "meta.json").is_file() or not recorded.is_file():
        sys.exit(f"error: {args.prepared} is not a `prepare` directory (no meta.json and .hydra/overrides.yaml)")
    overrides = [o for o in OmegaConf.load(recorded) if not o.lstrip("+").startswith("hydra.")]
    kmt(
        "train",
        *overrides,
        "data=prepared",
        f"data.path={args.prepared.resolve()}",
        f"hydra.run.dir={args.out}",
        *args.overrides,
        env={"KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax")},
    )

    metrics = json.loads((args.out / "metrics.json").read_text())["train"]
    with open(args.out / "logs" / "history.csv", newline="", encoding="utf-8") as f:
        seconds = [float(row["epoch_seconds"]) for row in csv.DictReader(f)]
    kind = jax.devices()[0].device_kind
    peak = next((flops for name, flops in PEAK_BF16 if name in kind), None)
    tokens = metrics["tokens_per_second"]
    figures = {
        "hardware": f"1 x {kind} (JAX)",
        "precision": OmegaConf.load(args.out / "config.yaml").trainer.precision,
        "parameters": metrics["parameters"],
        "epochs": metrics["epochs"],
        "tokens_per_second": round(tokens),
        "first_epoch_seconds": round(seconds[0], 2),
        "epoch_seconds": round(statistics.median(seconds[1:] or seconds), 2),
        "mfu": round(6 * metrics["parameters"] * tokens / peak, 4) if peak else None,
    }
    (args.out / "bench.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(
        f"{figures['hardware']}, {figures['precision']}: {tokens:,.0f} target tokens/s after the first epoch; "
        f"{figures['epoch_seconds']} s a later epoch (median), {figures['first_epoch_seconds']} s the first"
    )
    print(
        f"MFU {figures['mfu']:.1%} of {peak / 1e12:.0f} TFLOP/s dense bf16, at 6 x {metrics['parameters']:,} "
        "parameters FLOPs per target token (an estimate)"
        if peak
        else f"MFU: no dense bf16 peak known for {kind!r}"
    )
    print(json.dumps(figures))


def finish(args):
    from omegaconf import OmegaConf

    run = args.run_dir
    if not (run / "metrics.json").is_file() or not (run / "bench.json").is_file():
        sys.exit(f"error: {run} holds no metrics.json and bench.json: pass the run directory `train --out` finished")
    cfg, trained = OmegaConf.load(run / "config.yaml"), json.loads((run / "bench.json").read_text())
    if not (run / "export" / "saved_model.pb").is_file():
        average = cfg.trainer.average_last
        kmt("export", run, *(["--average", average] if average > 1 else []), capture=True)
    source, target = cfg.data.source_lang, cfg.data.target_lang
    corpus = Path(os.environ.get("KMT_DATA_DIR", "data")) / "multi30k"
    scores = {}
    for split in ("val", "test_2016_flickr"):
        output = kmt(
            "evaluate",
            run / "export",
            "--source",
            corpus / f"{split}.{source}",
            "--reference",
            corpus / f"{split}.{target}",
            "--lang",
            target,
            "--tokenized-reference",
            corpus / "tok" / f"{split}.lc.norm.tok.{target}",
            "--hypotheses",
            run / f"{split}.hyp.{target}",
            "--json",
            capture=True,
        )
        scores[split] = json.loads(output.strip().splitlines()[-1])
    val, test = scores["val"], scores["test_2016_flickr"]
    row = trained | {
        "direction": f"{source}->{target}",
        "tokenized_bleu": round(test["tokenized_bleu"], 2),
        "sacrebleu": round(test["bleu"], 2),
        "chrf": round(test["chrf"], 2),
        "val_sacrebleu": round(val["bleu"], 2),
        "val_tokenized_bleu": round(val["tokenized_bleu"], 2),
        "val_chrf": round(val["chrf"], 2),
        "train_minutes": round(json.loads((run / "metrics.json").read_text())["train"]["run_seconds"] / 60, 1),
        "run_dir": str(run),
        "bleu_signature": test["bleu_signature"],
    }
    (run / "bench.json").write_text(json.dumps(row, indent=2) + "\n")
    print("| direction | tok. BLEU | sacreBLEU | chrF | params | train min | tokens/s | MFU | hardware |")
    print("|---|---|---|---|---|---|---|---|---|")
    mfu = f"{row['mfu']:.1%}" if row["mfu"] is not None else ""
    print(
        f"| {row['direction']} | {row['tokenized_bleu']} | {row['sacrebleu']} | {row['chrf']} | "
        f"{row['parameters']:,} | {row['train_minutes']} | {row['tokens_per_second']:,} | {mfu} | "
        f"{row['hardware']} |"
    )
    print(f"val: sacreBLEU {row['val_sacrebleu']}, tokenized BLEU {row['val_tokenized_bleu']}, chrF {row['val_chrf']}")
    print(json.dumps(row))


def main():
    args = parse_args()
    {"prepare": prepare, "train": train, "finish": finish}[args.command](args)


if __name__ == "__main__":
    main()
