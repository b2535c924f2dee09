"""Sequence-level knowledge distillation on Multi30k (Kim & Rush, 2016): a teacher and the student it taught.

    python bench/distill.py en_de --teacher runs/multi30k_en_de/<time> --student-minutes 85 [OVERRIDE ...]

1. The teacher's CTranslate2 int8 directory (`kmt-export --format ctranslate2 --quantization int8`, made if
   missing) translates Multi30k's training sources with beam 5 into OUTPUT/distilled.de: the distilled targets.
2. `kmt-train experiment=multi30k_en_de_student data.train.target=OUTPUT/distilled.de` trains the student
   (`conf/model/student.yaml`) into OUTPUT/student.
3. The table, for each model at beam 5: test_2016_flickr BLEU (tokenized, as published Multi30k results, and
   sacreBLEU), parameters, export sizes, and sentences/s at batch 64 through its SavedModel and its CTranslate2 int8
   directory (the first --sentences test sentences, the four alternating over --repeats rounds, medians).

A step whose result is already there is not redone (the distilled file, the student's export), so a stopped bench
resumes when run again with the same OUTPUT.
"""

import argparse
import os
import subprocess
import sys
from pathlib import Path

from common import hardware, median, print_json, print_table, timed  # bench/ is on sys.path

PAIRS = {"en_de": ("en", "de")}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pair", choices=sorted(PAIRS), help="the Multi30k direction")
    parser.add_argument("--teacher", required=True, help="the teacher's run directory (kmt-train experiment=...)")
    parser.add_argument("--output", help="where the distilled targets and the student go (default: runs/bench/"
                        "distill_PAIR)")  # fmt: skip
    parser.add_argument("--student-minutes", type=float, default=85.0, help="the student's training budget "
                        "(trainer.max_minutes; default: 85, the teacher recipe's)")  # fmt: skip
    parser.add_argument("--sentences", type=int, default=1000, help="test sentences timed (default: 1000)")
    parser.add_argument("--repeats", type=int, default=2, help="timing rounds (default: 2)")
    parser.add_argument("overrides", nargs="*", help="more of the student's kmt-train overrides (key=value)")
    args = parser.parse_intermixed_args(argv)  # overrides may follow the options
    if args.sentences < 1 or args.repeats < 1 or args.student_minutes <= 0:
        parser.error("--sentences, --repeats and --student-minutes must be positive")
    return args


def cli(module, *args):
    """`python -m kmt.cli.MODULE args...`, its output passed through; a failure ends the bench in one line."""
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    if subprocess.run([sys.executable, "-m", f"kmt.cli.{module}", *map(str, args)], env=env).returncode:
        raise SystemExit(f"bench/distill.py: kmt-{module} {' '.join(map(str, args))} failed (its error is above)")


def lines_of(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def exports(run_dir):
    """`(SavedModel at beam 5, CTranslate2 int8 directory)` of a run, each made if missing from the weights its own
    export has (the last epoch's, or the average of the last `trainer.average_last`)."""
    import json

    from omegaconf import OmegaConf

    run_dir = Path(run_dir)
    saved_model, ctranslate2 = run_dir / "export_beam5", run_dir / "ctranslate2_int8"
    epochs = json.loads((run_dir / "metrics.json").read_text())["train"]["epochs"]
    average = min(OmegaConf.load(run_dir / "config.yaml").trainer.average_last or 1, epochs)
    weights = ["--average", average] if average > 1 else []
    if not (saved_model / "saved_model.pb").exists():
        cli("export", run_dir, *weights, "--beam-size", 5, "--output", saved_model)
    if not (ctranslate2 / "model.bin").exists():
        cli("export", run_dir, *weights, "--format", "ctranslate2", "--quantization", "int8")
    return saved_model, ctranslate2


def size_mib(path):
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file()) / 2**20


def main(argv=None):
    args = parse_args(argv)
    source, target = PAIRS[args.pair]
    teacher = Path(args.teacher)
    if not (teacher / "config.yaml").is_file():
        raise SystemExit(f"bench/distill.py: {teacher} is not a run directory (train one: kmt-train "
                         f"experiment=multi30k_{args.pair})")  # fmt: skip
    corpus = Path(os.environ.get("KMT_DATA_DIR", "data")) / "multi30k"
    output = Path(args.output or f"runs/bench/distill_{args.pair}")
    output.mkdir(parents=True, exist_ok=True)
    runs = {"teacher": teacher, "student": output / "student"}
    teacher_exports = exports(teacher)

    distilled = output / f"distilled.{target}"
    train_sources = corpus / f"train.{source}"
    if not distilled.exists() or len(lines_of(distilled)) != len(lines_of(train_sources)):
        partial = distilled.with_suffix(".partial")
        cli("translate", teacher_exports[1], "--beam-size", 5, "--input", train_sources, "--output", partial)
        partial.replace(distilled)
    if not (runs["student"] / "export" / "saved_model.pb").exists():
        recipe = [f"experiment=multi30k_{args.pair}_student", f"data.train.target={distilled.resolve()}"]
        budget = [f"trainer.max_minutes={args.student_minutes}", f"hydra.run.dir={runs['student']}"]
        cli("train", *recipe, *budget, *args.overrides)

    import json

    import tensorflow_text  # noqa: F401  (the SavedModel's ops)

    from kmt.api import evaluate, load

    test_source = lines_of(corpus / f"test_2016_flickr.{source}")
    references = lines_of(corpus / f"test_2016_flickr.{target}")
    tokenized = lines_of(corpus / "tok" / f"test_2016_flickr.lc.norm.tok.{target}")
    rows, translators = [], {}
    for name, run_dir in runs.items():
        saved_model, ctranslate2 = exports(run_dir)
        translators[name, "SavedModel"] = load(saved_model, batch_size=64)
        translators[name, "CTranslate2 int8"] = load(ctranslate2, batch_size=64)
        scores = evaluate(translators[name, "SavedModel"], test_source, references, tokenized_references=tokenized,
                          lang=target)  # fmt: skip
        metrics = json.loads((run_dir / "metrics.json").read_text())
        rows.append(
            {
                "model": name,
                "tokenized BLEU": scores["tokenized_bleu"],
                "sacreBLEU": scores["bleu"],
                "parameters (M)": metrics["train"]["parameters"] / 1e6,
                "SavedModel MiB": size_mib(saved_model),
                "CTranslate2 int8 MiB": size_mib(ctranslate2),
                "epochs": metrics["train"]["epochs"],
            }
        )
    sentences = test_source[: args.sentences]
    seconds = {key: [] for key in translators}
    for translator in translators.values():
        translator.translate(sentences[:64])  # warm-up: tracing, kernel set-up
    for _ in range(args.repeats):
        for key, translator in translators.items():
            seconds[key].append(timed(translator.translate, sentences)[1])
    for row in rows:
        for path in ("SavedModel", "CTranslate2 int8"):
            row[f"{path} sent/s"] = len(sentences) / median(seconds[row["model"], path])
    teacher_speed = rows[0]["SavedModel sent/s"]
    for row in rows:
        row["vs teacher SavedModel"] = row["SavedModel sent/s"] / teacher_speed
        row["CTranslate2 int8 vs teacher SavedModel"] = row["CTranslate2 int8 sent/s"] / teacher_speed
    columns = list(rows[0])
    print(f"Multi30k {source}->{target}: the teacher {teacher} and its student {runs['student']}, beam 5, batch 64, "
          f"{len(sentences)} test sentences, on {hardware()}")  # fmt: skip
    print_table(rows, columns)
    print_json("distill", pair=args.pair, teacher=str(teacher), student=str(runs["student"]), rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
