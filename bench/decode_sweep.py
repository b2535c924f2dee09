"""Search settings chosen on a held-out split: beam size x length penalty, decoded with one trained model.

    python bench/decode_sweep.py runs/bench/multi30k_en_de/<time> --average 5 --length-penalties 0.6,1.0,1.4
    python bench/decode_sweep.py RUN_DIR --split val --beam-sizes 1,5 --length-penalties 0.6

The run's model (its last epoch checkpoint, or the average of its last `--average` epoch checkpoints, as
`trainer.average_last` and `kmt-export --average` make it) is wrapped in `kmt.inference.translator.Translator` once
per setting, the same graph `kmt-export` saves, and translates the run's `--split` (default `val`: choose search
settings on val, report test only once). Each row gives sacreBLEU and chrF on raw text, the lowercased
Moses-tokenized BLEU when the corpus has `tok/` references (Multi30k), and the length ratio hypothesis / reference
(sacreBLEU's, 13a tokens): below 1.0 the brevity penalty is costing BLEU. Training is not touched; nothing is
written unless `--out` is given.

To choose settings that generalize rather than fit one split, each row also scores the split's first and second
halves apart (tokenized BLEU where there are `tok/` references, else sacreBLEU), and the last line names the chosen
setting: the one best on both halves when there is one, else the one whose worse half is best.
"""

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import markdown_table, print_json  # noqa: E402  (bench/ is on sys.path)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a kmt-train run directory (holding config.yaml, tokenizer/, checkpoints/)")
    parser.add_argument(
        "--average",
        type=int,
        default=0,
        metavar="N",
        help="average the last N epoch checkpoints (default: 0, the last checkpoint alone)",
    )
    parser.add_argument("--split", default="val", help="the run's split to translate: val or test (default: val)")
    parser.add_argument("--beam-sizes", default="5", help="comma-separated beam sizes (default: 5)")
    parser.add_argument("--length-penalties", default="0.6", help="comma-separated GNMT alphas (default: 0.6)")
    parser.add_argument("--sentences", type=int, default=0, help="translate only the first N (default: 0, all)")
    parser.add_argument("--out", help="also write the table as markdown to this file")
    return parser.parse_args(argv)


def floats(text):
    return [float(v) for v in text.split(",") if v]


def tokenized_references(cfg, split):
    """Multi30k's lowercased tokenized references for `split`, or None for other corpora."""
    from kmt.data.sources import multi30k_file

    if cfg.data.name != "multi30k":
        return None
    path = multi30k_file(cfg.data.dir, split, cfg.data.target_lang, tokenized=True)
    return path.read_text(encoding="utf-8").splitlines() if path.is_file() else None


def halves_bleu(hypotheses, references, tokenized, lang):
    """BLEU of the first and of the second half of the lines: tokenized BLEU against `tokenized` references when
    given, else sacreBLEU on raw text."""
    from kmt.metrics import tokenized_bleu, translation_scores

    middle = len(hypotheses) // 2
    scores = []
    for part in (slice(None, middle), slice(middle, None)):
        if tokenized is not None:
            scores.append(tokenized_bleu(hypotheses[part], tokenized[part], lang)["tokenized_bleu"])
        else:
            scores.append(translation_scores(hypotheses[part], references[part])["bleu"])
    return [round(score, 2) for score in scores]


def choose(rows):
    """The setting best on both halves when one is, else the one whose worse half is best: (row, why)."""
    for row in rows:
        if all(row["halves"][i] >= max(other["halves"][i] for other in rows) for i in (0, 1)):
            return row, "best on both halves"
    return max(rows, key=lambda row: min(row["halves"])), "no setting is best on both halves: the best worse half"


def main(argv=None):
    args = parse_args(argv)
    from kmt.checkpoints import average_checkpoints, load_run_model
    from kmt.data import load_corpus
    from kmt.errors import KmtError
    from kmt.inference.keras_translator import KerasTranslator
    from kmt.inference.settings import SearchSettings
    from kmt.metrics import tokenized_bleu, translation_scores
    from kmt.run_dir import RunDir

    try:
        cfg, vocabularies, model = load_run_model(args.run_dir)
        if args.average:
            average_checkpoints(model, RunDir(args.run_dir).checkpoints.last(args.average))
    except KmtError as error:
        raise SystemExit(f"error: {error}") from None
    cfg.data.download = False
    pairs = load_corpus(cfg.data)[args.split]
    sources, references = list(pairs.source), list(pairs.target)
    tokenized_data = cfg.data.tokenized  # load_run_model gives a run from before the option its default, false
    # A run trained on the tok/ copies is scored against them already (tok:none): no second tokenized BLEU.
    tokenized = None if tokenized_data else tokenized_references(cfg, args.split)
    if args.sentences:
        sources, references = sources[: args.sentences], references[: args.sentences]
        tokenized = tokenized[: args.sentences] if tokenized else None

    rows = []
    for beam_size in [int(b) for b in floats(args.beam_sizes)]:
        for alpha in floats(args.length_penalties):
            settings = SearchSettings.from_config(cfg.decode).replace(beam_size=beam_size, length_penalty=alpha)
            translator = KerasTranslator(model, vocabularies, settings)
            started = time.perf_counter()
            hypotheses = translator.translate(sources)
            seconds = time.perf_counter() - started
            scores = translation_scores(hypotheses, references, tokenized=tokenized_data)
            row = {
                "beam": beam_size,
                "alpha": alpha,
                "bleu": round(scores["bleu"], 2),
                "chrf": round(scores["chrf"], 2),
                "length_ratio": round(scores["length_ratio"], 3),
                "seconds": round(seconds, 1),
            }
            if tokenized is not None:
                row["tokenized_bleu"] = round(
                    tokenized_bleu(hypotheses, tokenized, cfg.data.target_lang)["tokenized_bleu"], 2
                )
            row["halves"] = halves_bleu(hypotheses, references, tokenized, cfg.data.target_lang)
            rows.append(row)
            print(f"beam {beam_size} alpha {alpha}: " + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)

    bleu_name = "tok. BLEU (tok/ text)" if tokenized_data else "sacreBLEU"
    columns = [
        ("beam", "beam"),
        ("alpha", "length penalty"),
        ("bleu", f"{args.split} {bleu_name}"),
        ("chrf", "chrF"),
        ("tokenized_bleu", "tok. BLEU"),
        ("length_ratio", "hyp/ref length"),
        ("halves", "BLEU of each half"),
        ("seconds", "decode s"),
    ]
    if tokenized is None:
        columns.remove(("tokenized_bleu", "tok. BLEU"))
    cells = [{k: " / ".join(map(str, v)) if k == "halves" else str(v) for k, v in row.items()} for row in rows]
    table = markdown_table(cells, columns)  # figures as rounded
    print(table, end="")
    chosen, why = choose(rows)
    print(f"chosen: beam {chosen['beam']} alpha {chosen['alpha']} ({why})")
    print_json(
        "decode_sweep",
        run_dir=args.run_dir,
        average=args.average,
        split=args.split,
        rows=rows,
        chosen={"beam": chosen["beam"], "alpha": chosen["alpha"], "why": why},
    )
    if args.out:
        Path(args.out).write_text(table, encoding="utf-8")


if __name__ == "__main__":
    main()
