"""Multi30k on an accelerator that has JAX and no TensorFlow: prepared here, trained there, exported and scored here,
by kmt's own commands and library; this script adds the figures a GPU run is reported with.

    python bench/multi30k_jax.py prepare en_de --out .gpu/en_de [overrides]     # here
    KERAS_BACKEND=jax python bench/multi30k_jax.py train .gpu/en_de --out OUT [overrides]   # on the accelerator
    python bench/multi30k_jax.py finish OUT                                     # here: export, scores, results row

`prepare` is `kmt-prepare experiment=multi30k_<direction> [overrides] hydra.run.dir=DIR`. `train` is `kmt-train` with
the preparation's overrides, `data=prepared data.path=DIR hydra.run.dir=OUT` and the overrides given (run again, it
resumes). It then prints target tokens/s over the epochs after the first (which compiles), the seconds an epoch takes,
and the model FLOPs utilization (MFU) against the chip's dense bf16 peak at 6 x parameters FLOPs a target token
(forward and backward through every weight once; attention's length term is not counted), into OUT/bench.json.
`finish` makes the SavedModel with `kmt.export` (of the average the run scored) unless the run made it, scores val
and test_2016_flickr with `kmt.evaluate` against $KMT_DATA_DIR/multi30k, and prints the results row.

Under XLA each batch shape compiles once (`data.bucket_width=1`: one shape per length). Several jobs on one GPU each
need `XLA_PYTHON_CLIENT_MEM_FRACTION` (JAX takes 75% of the GPU's memory per process; 0.2 each for four jobs). The
training machine needs keras, hydra-core, omegaconf, sentencepiece, sacrebleu, h5py and matplotlib beside JAX.
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


def command(name, *args, env=None):
    """`python -m kmt.cli.<name> args` (this repository on PYTHONPATH); exits on failure."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    environment = os.environ | {"PYTHONPATH": path} | (env or {})
    result = subprocess.run([sys.executable, "-m", f"kmt.cli.{name}", *map(str, args)], text=True, env=environment)
    if result.returncode:
        sys.exit(result.returncode)


def prepare(args):
    command("prepare", f"experiment=multi30k_{args.direction}", *args.overrides, f"hydra.run.dir={args.out}")


def train(args):
    import jax  # only asked for the device's kind once the run is done
    from omegaconf import OmegaConf

    recorded = args.prepared / ".hydra" / "overrides.yaml"
    if not (args.prepared / "meta.json").is_file() or not recorded.is_file():
        sys.exit(f"error: {args.prepared} is not a `prepare` directory (no meta.json and .hydra/overrides.yaml)")
    overrides = [o for o in OmegaConf.load(recorded) if not o.lstrip("+").startswith("hydra.")]
    prepared = ["data=prepared", f"data.path={args.prepared.resolve()}", f"hydra.run.dir={args.out}"]
    backend = {"KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax")}
    command("train", *overrides, *prepared, *args.overrides, env=backend)

    metrics = json.loads((args.out / "metrics.json").read_text())["train"]
    with open(args.out / "logs" / "history.csv", newline="", encoding="utf-8") as f:
        seconds = [float(row["epoch_seconds"]) for row in csv.DictReader(f)]
    kind = jax.devices()[0].device_kind
    peak = next((flops for name, flops in PEAK_BF16 if name in kind), None)
    tokens, parameters = metrics["tokens_per_second"], metrics["parameters"]
    figures = {"hardware": f"1 x {kind} (JAX)", "precision": OmegaConf.load(args.out / "config.yaml").trainer.precision}
    figures |= {"parameters": parameters, "epochs": metrics["epochs"], "tokens_per_second": round(tokens)}
    later = round(statistics.median(seconds[1:] or seconds), 2)
    figures |= {"first_epoch_seconds": round(seconds[0], 2), "epoch_seconds": later}
    figures["mfu"] = round(6 * parameters * tokens / peak, 4) if peak else None
    (args.out / "bench.json").write_text(json.dumps(figures, indent=2) + "\n")
    speed = f"{tokens:,.0f} target tokens/s after the first epoch; {figures['epoch_seconds']} s a later epoch (median)"
    print(f"{figures['hardware']}, {figures['precision']}: {speed}, {figures['first_epoch_seconds']} s the first")
    if peak:
        print(
            f"MFU {figures['mfu']:.1%} of {peak / 1e12:.0f} TFLOP/s dense bf16, at 6 x {parameters:,} parameters FLOPs "
            "per target token (an estimate)"
        )
    else:
        print(f"MFU: no dense bf16 peak known for {kind!r}")
    print(json.dumps(figures))


def finish(args):
    import kmt
    from kmt.data.sources import read_lines
    from kmt.errors import KmtError
    from kmt.run_dir import RunDir

    run = args.run_dir
    if not (run / "metrics.json").is_file() or not (run / "bench.json").is_file():
        sys.exit(f"error: {run} holds no metrics.json and bench.json: pass the run directory `train --out` finished")
    cfg, trained = RunDir(run).read_config(), json.loads((run / "bench.json").read_text())
    source, target, scores = cfg.data.source_lang, cfg.data.target_lang, {}
    corpus = Path(os.environ.get("KMT_DATA_DIR", "data")) / "multi30k"
    try:
        if not (run / "export" / "saved_model.pb").is_file():
            kmt.export(run, average=cfg.trainer.average_last if cfg.trainer.average_last > 1 else None)
        translator = kmt.load(run / "export")
        for split in ("val", "test_2016_flickr"):
            sources, references = read_lines(corpus / f"{split}.{source}"), read_lines(corpus / f"{split}.{target}")
            tokenized = read_lines(corpus / "tok" / f"{split}.lc.norm.tok.{target}")
            scores[split] = kmt.evaluate(translator, sources, references, tokenized_references=tokenized, lang=target)
            hypotheses = "".join(f"{line}\n" for line in scores[split]["translations"])
            (run / f"{split}.hyp.{target}").write_text(hypotheses, "utf-8")
    except KmtError as error:
        sys.exit(f"error: {error}")
    val, test = scores["val"], scores["test_2016_flickr"]
    minutes = json.loads((run / "metrics.json").read_text())["train"]["run_seconds"] / 60
    named = {"tokenized_bleu": test["tokenized_bleu"], "sacrebleu": test["bleu"], "chrf": test["chrf"]}
    named |= {"val_sacrebleu": val["bleu"], "val_tokenized_bleu": val["tokenized_bleu"], "val_chrf": val["chrf"]}
    row = trained | {"direction": f"{source}->{target}"} | {key: round(value, 2) for key, value in named.items()}
    row |= {"train_minutes": round(minutes, 1), "run_dir": str(run), "bleu_signature": test["bleu_signature"]}
    (run / "bench.json").write_text(json.dumps(row, indent=2) + "\n")
    mfu = f"{row['mfu']:.1%}" if row["mfu"] is not None else ""
    cells = [*(row[key] for key in ("direction", "tokenized_bleu", "sacrebleu", "chrf")), f"{row['parameters']:,}"]
    cells += [row["train_minutes"], f"{row['tokens_per_second']:,}", mfu, row["hardware"]]
    print("| direction | tok. BLEU | sacreBLEU | chrF | params | train min | tokens/s | MFU | hardware |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("| " + " | ".join(map(str, cells)) + " |")
    print(json.dumps(row))


def main():
    args = parse_args()
    {"prepare": prepare, "train": train, "finish": finish}[args.command](args)


if __name__ == "__main__":
    main()
