"""Multi30k benchmark: train one direction from scratch, average checkpoints, export, decode test_2016_flickr
through the SavedModel with beam search, and print one results row (markdown) plus a JSON line.

    python bench/multi30k.py en_de                      # the recipe in conf/experiment/multi30k_en_de.yaml
    python bench/multi30k.py de_en trainer.epochs=20    # any Hydra override goes to kmt-train

Scores: sacreBLEU (cased, 13a, raw references), chrF, and the lowercased Moses-tokenized BLEU that published
Multi30k numbers use (against $KMT_DATA_DIR/multi30k/tok/). Corpora come from $KMT_DATA_DIR (default ./data).
"""

import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import hardware

ANCHORS = {"en_de": "fairseq Transformer 4+4, d=128, avg 10, beam 5: 41.02", "de_en": "Transformer 3+3, d=256, greedy: 36.52"}


def main():
    direction = sys.argv[1] if len(sys.argv) > 1 else "en_de"
    if direction not in ANCHORS:
        sys.exit(f"error: direction must be en_de or de_en. Received: {direction}")
    overrides = sys.argv[2:]
    source, target = direction.split("_")
    data = Path(os.environ.get("KMT_DATA_DIR", "data")) / "multi30k"
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    run_dir = Path("runs") / "bench" / f"multi30k_{direction}" / stamp
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kmt.cli.train", f"experiment=multi30k_{direction}",
                    f"hydra.run.dir={run_dir}", *overrides], check=True)
    total_seconds = time.perf_counter() - started
    evaluation = subprocess.run(
        [sys.executable, "-m", "kmt.cli.evaluate", str(run_dir / "export"),
         "--source", str(data / f"test_2016_flickr.{source}"), "--reference", str(data / f"test_2016_flickr.{target}"),
         "--tokenized-reference", str(data / "tok" / f"test_2016_flickr.lc.norm.tok.{target}"), "--lang", target,
         "--hypotheses", str(run_dir / f"test_2016_flickr.hyp.{target}"), "--json"],
        check=True, capture_output=True, text=True,
    )
    scores = json.loads(evaluation.stdout.strip().splitlines()[-1])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    row = {
        "direction": direction.replace("_", "->"),
        "tokenized_bleu": round(scores["tokenized_bleu"], 2),
        "sacrebleu": round(scores["bleu"], 2),
        "chrf": round(scores["chrf"], 2),
        "val_sacrebleu": round(metrics["val"]["bleu"], 2),
        "parameters": metrics["train"]["parameters"],
        "epochs": metrics["train"]["epochs"],
        "train_minutes": round(metrics["train"]["wall_seconds"] / 60, 1),
        "total_minutes": round(total_seconds / 60, 1),
        "tokens_per_second": round(metrics["train"]["tokens_per_second"]),
        "hardware": hardware(),
        "run_dir": str(run_dir),
        "command": " ".join(["python bench/multi30k.py", direction, *overrides]),
        "anchor": ANCHORS[direction],
        "bleu_signature": scores["bleu_signature"],
    }
    (run_dir / "bench.json").write_text(json.dumps(row, indent=2) + "\n")
    print("| direction | tok. BLEU | sacreBLEU | chrF | params | train min | tokens/s | hardware |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {row['direction']} | {row['tokenized_bleu']} | {row['sacrebleu']} | {row['chrf']} | "
          f"{row['parameters'] / 1e6:.1f}M | {row['train_minutes']} | {row['tokens_per_second']} | {row['hardware']} |")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
