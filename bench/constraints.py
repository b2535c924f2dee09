"""Lexically constrained decoding through the SavedModel: `translate` against `translate_constrained` on the same
sentences, with constraints drawn from the references as Post & Vilar (2018) drew them, side by side.

    python bench/constraints.py RUN_DIR --source test.en --target test.de
    python bench/constraints.py RUN_DIR --source test.en --target test.de --beam-size 5 --batch-size 64 --seed 1

Each sentence gets 1 to 3 phrases (`--most`), each 1 to 3 consecutive words of its reference (`--longest`), not
overlapping, drawn with `--seed`. The run is exported once (`kmt.export`, its averaged or last checkpoint as its
export was, `--beam-size`), reloaded with `tf.saved_model.load`, and both signatures translate every sentence,
timed call by call in a rotating order after one warm-up call each (calls of exactly `--batch-size` sentences,
the last filled by wrapping around). Reported: sacreBLEU of each against the references, the share of sentences
whose translation contains all its phrases (of those whose phrases fit the output limit), and sentences a second
with the time against `translate`'s (medians over `--repeats`).
"""

import argparse
import itertools
import os
import random
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import hardware, median, print_json, print_table, timed  # noqa: E402  (bench/ is on sys.path)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a kmt-train run directory")
    parser.add_argument("--source", required=True, help="source sentences, one a line")
    parser.add_argument("--target", required=True, help="reference translations, where the phrases come from")
    parser.add_argument("--most", type=int, default=3, help="most phrases a sentence (default: 3)")
    parser.add_argument("--longest", type=int, default=3, help="most words a phrase (default: 3)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the phrases drawn (default: 1)")
    parser.add_argument("--sentences", type=int, default=1000, help="sentences to translate (default: 1000)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences a call (default: 64)")
    parser.add_argument("--beam-size", type=int, default=5, help="the export's beam (default: 5)")
    parser.add_argument(
        "--length-penalty", type=float, help="the export's GNMT alpha (default: the run's decode.length_penalty)"
    )
    parser.add_argument("--repeats", type=int, default=1, help="timed passes over the sentences (default: 1)")
    return parser.parse_args(argv)


def draw_phrases(reference, rng, most=3, longest=3):
    """1 to `most` non-overlapping spans of 1 to `longest` consecutive words of `reference`, in reference order."""
    words = reference.split()
    free, phrases = set(range(len(words))), []
    for _ in range(rng.randint(1, most)):
        for length in range(rng.randint(1, longest), 0, -1):  # as long as drawn, else as long as fits
            starts = [i for i in range(len(words) - length + 1) if all(j in free for j in range(i, i + length))]
            if starts:
                start = rng.choice(starts)
                free -= set(range(start, start + length))
                phrases.append((start, " ".join(words[start : start + length])))
                break
    return [phrase for _, phrase in sorted(phrases)]


def main(argv=None):
    import sacrebleu
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    import kmt

    args = parse_args(argv)
    sources = Path(args.source).read_text(encoding="utf-8").splitlines()[: args.sentences]
    references = Path(args.target).read_text(encoding="utf-8").splitlines()[: args.sentences]
    rng = random.Random(args.seed)
    phrases = [draw_phrases(line, rng, args.most, args.longest) for line in references]
    width = max(map(len, phrases))
    table = [[*row, *[""] * (width - len(row))] for row in phrases]
    with tempfile.TemporaryDirectory() as directory:
        search = {"beam_size": args.beam_size}
        if args.length_penalty is not None:
            search["length_penalty"] = args.length_penalty
        kmt.export(args.run_dir, output=Path(directory) / "export", search=search)
        signatures = tf.saved_model.load(str(Path(directory) / "export")).signatures
        plain, constrained = signatures["translate"], signatures["translate_constrained"]
        variants = {
            "translate": lambda text, phrases: plain(text=text),
            "translate_constrained": lambda text, phrases: constrained(text=text, constraints=phrases),
        }
        cycle = itertools.cycle(range(len(sources)))
        calls = [[next(cycle) for _ in range(args.batch_size)] for _ in range(-(-len(sources) // args.batch_size))]
        batches = [(tf.constant([sources[i] for i in call]), tf.constant([table[i] for i in call])) for call in calls]
        for fn in variants.values():
            fn(*batches[0])  # warm-up: traces and loads kernels
        seconds = {name: [] for name in variants}
        texts = {name: [None] * len(sources) for name in variants}
        names = list(variants)
        for _ in range(args.repeats):
            spent = dict.fromkeys(names, 0.0)
            for k, (call, batch) in enumerate(zip(calls, batches)):
                for name in names[k % len(names) :] + names[: k % len(names)]:
                    outputs, took = timed(variants[name], *batch)
                    spent[name] += took
                    for i, text in zip(call, outputs["translation"].numpy()):
                        texts[name][i] = text.decode("utf-8")
            for name in names:
                seconds[name].append(spent[name])
    fitted = [i for i, text in enumerate(texts["translate_constrained"]) if text or not phrases[i]]
    kept = sum(all(p in texts["translate_constrained"][i] for p in phrases[i]) for i in fitted)
    count = len(calls) * args.batch_size
    base = median(seconds["translate"])
    rows = [
        {
            "signature": name,
            "BLEU": sacrebleu.corpus_bleu(texts[name], [references]).score,
            "sentences with every phrase": f"{sum(all(p in texts[name][i] for p in phrases[i]) for i in fitted)}"
            f" of {len(fitted)}",
            "sentences/s": count / median(times),
            "time vs translate": median(times) / base,
        }
        for name, times in seconds.items()
    ]
    alpha = "the run's" if args.length_penalty is None else args.length_penalty
    print(
        f"{len(sources)} sentences, {sum(map(len, phrases))} phrases (seed {args.seed}), calls of "
        f"{args.batch_size}, beam {args.beam_size}, length penalty {alpha}, {hardware()}"
    )
    print_table(rows, ["signature", "BLEU", "sentences with every phrase", "sentences/s", "time vs translate"])
    print(f"{len(sources) - len(fitted)} sentences' phrases did not fit their output limit")
    print_json(
        "constraints",
        sentences=len(sources),
        phrases=sum(map(len, phrases)),
        satisfied=kept,
        fitted=len(fitted),
        batch_size=args.batch_size,
        beam_size=args.beam_size,
        rows=rows,
    )


if __name__ == "__main__":
    main()
