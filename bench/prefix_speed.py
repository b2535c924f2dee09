"""Prefix decoding speed through the SavedModel: `translate` against `translate_prefix` on the same sentences, with
empty prefixes and with the first words of each reference as prefixes, side by side.

    python bench/prefix_speed.py RUN_DIR --source val.en --target val.de
    python bench/prefix_speed.py RUN_DIR --source val.en --target val.de --beam-size 5 --batch-size 64 --words 2

The run is exported once (`kmt.export`, its last checkpoint, `--beam-size`), reloaded with `tf.saved_model.load`,
and its two signatures are timed after one warm-up call each. The N sentences are cut into calls of exactly
`--batch-size` sentences (wrapping around to fill the last); within each repeat the three variants take turns call
by call in a rotating order, so that all see the same state of the machine. Figures are medians over repeats.
"""

import argparse
import itertools
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import hardware, median, print_json, print_table, timed  # noqa: E402  (bench/ is on sys.path)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a kmt-train run directory of a Transformer")
    parser.add_argument("--source", required=True, help="source sentences, one a line")
    parser.add_argument("--target", required=True, help="reference translations: their first words are the prefixes")
    parser.add_argument("--words", type=int, default=2, help="reference words in each prefix (default: 2)")
    parser.add_argument("--sentences", type=int, default=512, help="sentences to translate (default: 512)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences a call (default: 64)")
    parser.add_argument("--beam-size", type=int, default=5, help="the export's beam (default: 5)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the sentences (default: 3)")
    return parser.parse_args(argv)


def main(argv=None):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    import kmt

    args = parse_args(argv)
    sources = Path(args.source).read_text(encoding="utf-8").splitlines()[: args.sentences]
    references = Path(args.target).read_text(encoding="utf-8").splitlines()[: args.sentences]
    prefixes = [" ".join(line.split()[: args.words]) for line in references]
    with tempfile.TemporaryDirectory() as directory:
        kmt.export(args.run_dir, output=Path(directory) / "export", search={"beam_size": args.beam_size})
        signatures = tf.saved_model.load(str(Path(directory) / "export")).signatures
        plain, prefixed = signatures["translate"], signatures["translate_prefix"]
        variants = {
            "translate": lambda text, prefix: plain(text=text),
            "translate_prefix, empty prefixes": lambda text, prefix: prefixed(
                text=text, prefix=tf.fill(tf.shape(text), "")
            ),
            f"translate_prefix, {args.words} reference words": lambda text, prefix: prefixed(text=text, prefix=prefix),
        }
        cycle = itertools.cycle(range(len(sources)))
        calls = [[next(cycle) for _ in range(args.batch_size)] for _ in range(-(-len(sources) // args.batch_size))]
        batches = [
            (tf.constant([sources[i] for i in call]), tf.constant([prefixes[i] for i in call])) for call in calls
        ]
        outputs = {name: fn(*batches[0]) for name, fn in variants.items()}  # warm-up: traces and loads kernels
        seconds = {name: [] for name in variants}
        names = list(variants)
        for _ in range(args.repeats):
            spent = dict.fromkeys(names, 0.0)
            for k, batch in enumerate(batches):
                for name in names[k % len(names) :] + names[: k % len(names)]:
                    outputs[name], took = timed(variants[name], *batch)
                    spent[name] += took
            for name in names:
                seconds[name].append(spent[name])
        texts = [t.decode() for t in outputs[names[2]]["translation"].numpy()]
        kept = sum(text.startswith(prefix) for text, prefix in zip(texts, (p.decode() for p in batches[-1][1].numpy())))
    count = len(calls) * args.batch_size
    base = median(seconds["translate"])
    rows = [
        {"signature": name, "sentences/s": count / median(times), "time vs translate": median(times) / base}
        for name, times in seconds.items()
    ]
    print(f"{count} sentences in calls of {args.batch_size}, beam {args.beam_size}, {hardware()}")
    print_table(rows, ["signature", "sentences/s", "time vs translate"])
    print(f"last call: {kept} of {len(texts)} translations begin with their prefix")
    print_json("prefix_speed", sentences=count, batch_size=args.batch_size, beam_size=args.beam_size, rows=rows)


if __name__ == "__main__":
    main()
