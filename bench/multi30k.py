"""Multi30k benchmark: train one direction from scratch, average checkpoints, export, decode test_2016_flickr
through the SavedModel with beam search, and print one results row (markdown) plus a JSON line.

    python bench/multi30k.py en_de                      # the recipe in conf/experiment/multi30k_en_de.yaml
    python bench/multi30k.py de_en trainer.epochs=20    # any Hydra override goes to kmt-train
    python bench/multi30k.py en_de --tok-data           # the anchors' protocol: lowercased, tokenized text
    python bench/multi30k.py en_de --resume runs/bench/multi30k_en_de/<time>  # continue a killed run

Scores: sacreBLEU (cased, 13a, raw references), chrF, and the lowercased Moses-tokenized BLEU that published
Multi30k numbers use (against $KMT_DATA_DIR/multi30k/tok/). Corpora come from $KMT_DATA_DIR (default ./data).
Before training starts, every file the run trains on and is scored against (the raw and tok/ test references
included) is found there or fetched from the Multi30k repository ($KMT_MULTI30K_URL names another copy, e.g. a
file:// folder); one that is neither stops the bench at once with a line naming it.

`--tok-data` trains, validates and tests on the lowercased, punctuation-normalized, Moses-tokenized copies in tok/
(`data.tokenized=true`), as the published systems did; runs go to runs/bench/multi30k_<direction>_tok/. The output
is then already in the references' form and is scored as is (tokenized BLEU, no re-tokenization); sacreBLEU and chrF
are computed on the Moses-detokenized output against the raw references, both lowercased (case is not modelled).

Stopping it: Ctrl-C, `kill` (SIGTERM) or a closed terminal (SIGHUP) reaches kmt-train too, which stops at the next
batch, saving the weights of the moment; the bench waits for it, then exits non-zero with the `--resume` command
that continues the run from its last completed epoch.
"""

import argparse
import csv
import datetime
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from common import hardware, recipe_config

ANCHORS = {
    "en_de": "fairseq Transformer 4+4, d=128, avg 10, beam 5: 41.02",
    "de_en": "Transformer 3+3, d=256, greedy: 36.52",
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "direction",
        nargs="?",
        choices=ANCHORS,
        default="en_de",
        help="which recipe: conf/experiment/multi30k_<direction>.yaml (default: en_de)",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides passed to kmt-train, e.g. trainer.epochs=20")
    parser.add_argument(
        "--tok-data",
        action="store_true",
        help="train, validate and test on the lowercased, tokenized tok/ copies (data.tokenized=true)",
    )
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        type=Path,
        help="continue a killed bench run in RUN_DIR from its last completed epoch, with the "
        "overrides (and --tok-data) it was started with, then any given here; its time budget "
        "counts the epochs already spent, and so does `train_minutes` (`total_minutes`, with the "
        "export and the test decode, counts this invocation only)",
    )
    return parser.parse_intermixed_args(argv)


def main():
    args = parse_args()
    direction, tok_data, user_overrides = args.direction, args.tok_data, args.overrides
    source, target = direction.split("_")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    run_dir = args.resume or Path("runs") / "bench" / f"multi30k_{direction}{'_tok' if tok_data else ''}" / stamp
    if args.resume:  # the run's own overrides, then the new ones (e.g. trainer.epochs=50 to train on)
        saved = run_overrides(args.resume, direction)
        tok_data = "data.tokenized=true" in saved
        if args.tok_data and not tok_data:
            sys.exit(f"error: {args.resume} was not trained with --tok-data; resume it without")
        user_overrides = [*(item for item in saved if item != "data.tokenized=true"), *user_overrides]
    overrides = [*(["data.tokenized=true"] if tok_data else []), *user_overrides]
    data = Path(prepare_corpus(recipe(direction, overrides), direction, tok_data)) / "multi30k"
    started = time.perf_counter()
    status, stopped_by = run_child(
        [
            sys.executable,
            "-m",
            "kmt.cli.train",
            f"experiment=multi30k_{direction}",
            f"hydra.run.dir={run_dir}",
            *overrides,
        ]
    )
    if stopped_by:
        print(
            f"error: stopped by {stopped_by.name}; continue the run from its last completed epoch with: "
            f"python bench/multi30k.py {direction} --resume {run_dir}",
            file=sys.stderr,
        )
        sys.exit(128 + stopped_by)
    if status:
        sys.exit(status)  # kmt-train has printed its one-line error
    total_seconds = time.perf_counter() - started
    hypotheses = run_dir / f"test_2016_flickr.hyp.{target}"
    raw, tok = data / "test_2016_flickr", data / "tok" / "test_2016_flickr.lc.norm.tok"
    if tok_data:  # the output is in the references' form already: BLEU splits on spaces only
        texts = ["--source", f"{tok}.{source}", "--reference", f"{tok}.{target}", "--tokenized"]
    else:
        texts = [
            "--source",
            f"{raw}.{source}",
            "--reference",
            f"{raw}.{target}",
            "--tokenized-reference",
            f"{tok}.{target}",
            "--lang",
            target,
        ]
    from kmt.run_dir import RunDir

    run = RunDir(run_dir)
    evaluation = subprocess.run(
        [sys.executable, "-m", "kmt.cli.evaluate", str(run.export), *texts, "--hypotheses", str(hypotheses), "--json"],
        capture_output=True,
        text=True,
    )
    if evaluation.returncode:
        lines = evaluation.stderr.strip().splitlines() or [f"exit status {evaluation.returncode}"]
        sys.exit(f"error: kmt-evaluate of {run.export} failed: {lines[-1].removeprefix('error: ')}")
    scores = json.loads(evaluation.stdout.strip().splitlines()[-1])
    if tok_data:
        lowercased = lowercased_detokenized_scores(hypotheses, f"{raw}.{target}", target)
        scores = {"tokenized_bleu": scores["bleu"]} | lowercased
    metrics = json.loads(run.metrics.read_text())
    row = {
        "direction": direction.replace("_", "->"),
        "tokenized_bleu": round(scores["tokenized_bleu"], 2),
        "sacrebleu": round(scores["bleu"], 2),
        "chrf": round(scores["chrf"], 2),
        "val_sacrebleu": round(metrics["val"]["bleu"], 2),
        "parameters": metrics["train"]["parameters"],
        "epochs": metrics["train"]["epochs"],
        "train_minutes": round(metrics["train"]["run_seconds"] / 60, 1),  # every epoch, resumed or not
        "total_minutes": round(total_seconds / 60, 1),
        "tokens_per_second": round(run_tokens_per_second(run_dir)),  # every epoch too
        "hardware": hardware(),
        "run_dir": str(run_dir),
        "command": " ".join(
            ["python bench/multi30k.py", direction, *(["--tok-data"] if tok_data else []), *user_overrides]
        ),
        "anchor": ANCHORS[direction],
        "bleu_signature": scores["bleu_signature"],
        "data": "tok/ (lowercased, tokenized); sacreBLEU and chrF lowercased" if tok_data else "raw, cased",
    }
    (run_dir / "bench.json").write_text(json.dumps(row, indent=2) + "\n")
    print("| direction | tok. BLEU | sacreBLEU | chrF | params | train min | tokens/s | hardware |")
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {row['direction']} | {row['tokenized_bleu']} | {row['sacrebleu']} | {row['chrf']} | "
        f"{row['parameters'] / 1e6:.1f}M | {row['train_minutes']} | {row['tokens_per_second']} | {row['hardware']} |"
    )
    if tok_data:
        print("(trained and tested on tok/; sacreBLEU and chrF are lowercased, on the detokenized output)")
    print(json.dumps(row))


def recipe(direction, overrides):
    """The run's config, composed and validated as kmt-train will compose it; a bad override or value ends the bench
    with kmt-train's one-line error, before anything is fetched."""
    from kmt.cli.errors import check_overrides

    check_overrides([f"experiment=multi30k_{direction}", *overrides])
    return recipe_config(f"multi30k_{direction}", overrides)


def prepare_corpus(cfg, direction, tok_data):
    """Finds or fetches every Multi30k file the run will train on (per `cfg.data`) and be scored against: the test
    sources it translates and the raw and tok/ references (`--tok-data` translates the tok/ sources). Returns the
    data folder, `cfg.data.dir`; exits with one line naming the first file that is neither there nor fetchable.
    Fetched files come from `$KMT_MULTI30K_URL` (else the Multi30k repository), each whole or not at all."""
    from kmt.data.sources import MULTI30K_SPLITS, ensure_multi30k_file, multi30k_file
    from kmt.errors import DataError

    source, target = direction.split("_")
    files = [("test", source, tok_data), ("test", target, False), ("test", target, True)]
    if cfg.data.name == "multi30k":
        files = [
            (split, lang, cfg.data.tokenized)
            for split in MULTI30K_SPLITS
            for lang in (cfg.data.source_lang, cfg.data.target_lang)
        ] + files
    for split, lang, tokenized in dict.fromkeys(files):
        absent = not multi30k_file(cfg.data.dir, split, lang, tokenized).exists()
        try:
            path = ensure_multi30k_file(cfg.data.dir, split, lang, tokenized, download=cfg.data.download)
        except DataError as error:
            sys.exit(f"error: {' '.join(str(error).split())}")
        if absent:
            print(f"fetched {path}", flush=True)
    return cfg.data.dir


def run_child(command):
    """Runs `command` (kmt-train) to its end: `(exit status, the signal that stopped it, or None)`.

    The child gets a process group of its own, so the terminal's Ctrl-C reaches it once, through this process, and
    SIGINT, SIGTERM and SIGHUP sent to this process are passed on to it (a signal this process ignores, such as SIGHUP
    under nohup, stays ignored). This process waits for the child either way, so it cannot go on training, orphaned,
    after the bench has gone; `subprocess.run` would instead kill it on Ctrl-C before it could save.
    """
    child = subprocess.Popen(command, process_group=0)
    received = []

    def forward(signum, frame):
        received.append(signal.Signals(signum))
        child.send_signal(signum)

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, forward)
    try:
        status = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        return status, received[0]
    return status, (signal.Signals(-status) if status < 0 else None)  # killed from outside (e.g. SIGKILL)


def run_tokens_per_second(run_dir):
    """Target tokens per second over every epoch of the run, resumed or not, from its history.csv (kmt-train's
    `tokens_per_second` counts only its own invocation, and none for one that had no epoch left to train), leaving
    out the first epoch, which pays for tracing, when there are more."""
    from kmt.run_dir import RunDir

    with open(RunDir(run_dir).history, newline="", encoding="utf-8") as f:
        epochs = [(float(row["tokens_per_second"]), float(row["epoch_seconds"])) for row in csv.DictReader(f)]
    epochs = epochs[1:] or epochs
    return sum(rate * seconds for rate, seconds in epochs) / sum(seconds for _, seconds in epochs)


def run_overrides(run_dir, direction):
    """The Hydra overrides a bench run in `run_dir` was started with (Hydra's `.hydra/overrides.yaml`), less the
    experiment, so `--resume` continues it as it was started; exits with one line if it is not such a run."""
    from omegaconf import OmegaConf

    from kmt.run_dir import RunDir

    path = RunDir(run_dir).hydra_overrides
    if not path.exists():
        sys.exit(f"error: {run_dir} is not a run directory (no .hydra/overrides.yaml)")
    saved = [str(item) for item in OmegaConf.load(path)]
    if f"experiment=multi30k_{direction}" not in saved:
        sys.exit(f"error: {run_dir} is not a multi30k_{direction} run (its overrides: {' '.join(saved)})")
    return [item for item in saved if not item.startswith("experiment=")]


def lowercased_detokenized_scores(hypotheses_path, raw_reference_path, lang):
    """sacreBLEU (13a) and chrF of lowercased, Moses-tokenized output (a model trained on tok/), Moses-detokenized,
    against the raw references, both sides lowercased: the nearest to sacreBLEU such output allows."""
    from sacrebleu.metrics import BLEU, CHRF
    from sacremoses import MosesDetokenizer

    detokenizer = MosesDetokenizer(lang=lang)
    detokenized = [
        detokenizer.detokenize(line.split())  # unescapes &apos; and the like
        for line in Path(hypotheses_path).read_text(encoding="utf-8").splitlines()
    ]
    references = Path(raw_reference_path).read_text(encoding="utf-8").splitlines()
    bleu, chrf = BLEU(lowercase=True), CHRF(lowercase=True)
    return {
        "bleu": bleu.corpus_score(detokenized, [references]).score,
        "chrf": chrf.corpus_score(detokenized, [references]).score,
        "bleu_signature": str(bleu.get_signature()),
    }


if __name__ == "__main__":
    main()
