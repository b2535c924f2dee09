"""kmt's library face: each use case once, as a function; the command-line tools parse arguments, call one of these
and print. Re-exported from `kmt`:

```python
import kmt

cfg = kmt.compose_config("debug=smoke", "trainer.epochs=2")  # what `kmt-train debug=smoke trainer.epochs=2` runs
metrics = kmt.train(cfg, "runs/mine")                        # train, average, score, export
translator = kmt.load("runs/mine")                          # a run directory, a SavedModel or a CTranslate2 directory
translator.translate(["Tuesday, March 5, 1996"])
kmt.export("runs/mine", average=2)                            # runs/mine/export, from the last two epochs' average
kmt.evaluate(translator, sources, references)                 # BLEU, chrF, exact match
```
"""

import os
from typing import TYPE_CHECKING

from kmt.config import compose_config
from kmt.evaluation import evaluate
from kmt.inference.exporters import export, register_exporter
from kmt.training import train

if TYPE_CHECKING:
    from kmt.inference.translators import Translator

__all__ = ["compose_config", "train", "load", "export", "evaluate", "register_exporter"]


def load(path: str | os.PathLike, **options) -> "Translator":
    """A translator for `path`: a run directory (its Keras model, under any backend), a SavedModel export, or a
    CTranslate2 directory. Each has `translate(lines, *, settings=None, nbest=None)` and `score(sources, targets)`.

    Args:
        path: what `kmt.train`, `kmt-train` or `kmt.export` wrote.
        **options: the kind's own options (a CTranslate2 directory: `device`, `compute_type`, ...).
    """
    from kmt.inference.loading import load_translator

    return load_translator(path, **options)
