"""A run's checkpoints put to use: weights loaded with one-line errors, checkpoints averaged, a model rebuilt from a
run directory or loaded from its `model.keras`, the source of a fine-tuning run."""

import logging
from pathlib import Path

import numpy as np

from kmt.errors import KmtError
from kmt.run_dir import RunDir, check_weights

logger = logging.getLogger(__name__)


def load_weights(model, path):
    """`model.load_weights(path)`; a truncated or corrupt file is a one-line `KmtError` naming it. A file that reads
    but does not fit `model` keeps Keras's `ValueError`, for the caller to word."""
    try:
        model.load_weights(path)
    except Exception:
        check_weights(path)
        raise


def load_run_model(run_dir, checkpoint="last"):
    """`(cfg, vocabularies, model)` of a run: the model rebuilt from its `config.yaml` and `tokenizer/`, with
    the weights of `checkpoint` (see `Checkpoints.find`), uncompiled, in float32."""
    from kmt.build import build_model
    from kmt.tokenizer import Vocabularies

    run = RunDir(run_dir)
    cfg = run.read_config()
    path = run.checkpoints.find(checkpoint)
    vocabularies = Vocabularies.load(run.tokenizer)
    model = build_model(cfg.model, vocabularies.source.vocab_size, vocabularies.target.vocab_size, "float32")
    try:
        load_weights(model, path)
    except ValueError as error:
        raise KmtError(
            f"{path} does not fit the model of {run_dir}'s config.yaml ({str(error).splitlines()[0]}); "
            "pass a checkpoint of this run"
        ) from None
    return cfg, vocabularies, model


def load_run_keras(run_dir: "str | Path") -> tuple:
    """`(cfg, vocabularies, model)` of a run, the model loaded from its `model.keras`, uncompiled.

    A `model.keras` saved before kmt's models were classes (`kmt.models`) holds a plain functional model, without
    the decoding methods: the model is then rebuilt from the run's `config.yaml`, in float32, and takes that file's
    weights, which Keras saves by layer name, the names the classes keep.
    """
    import keras

    from kmt.build import build_model
    from kmt.models import Seq2SeqModel, model_class
    from kmt.tokenizer import Vocabularies

    run = RunDir(run_dir)
    cfg = run.read_config()
    vocabularies = Vocabularies.load(run.tokenizer)
    model_class(cfg.model.arch)  # its module imported: the class registered with Keras
    model = keras.saving.load_model(run.model, compile=False)
    if not isinstance(model, Seq2SeqModel):
        model = build_model(cfg.model, vocabularies.source.vocab_size, vocabularies.target.vocab_size, "float32")
        model.load_weights(run.model)
    return cfg, vocabularies, model


# Model settings a fine-tuning run may change: they shape no weight.
FINE_TUNABLE = (
    "alignment_layer",
    "alignment_heads",
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "late_dropout",
    "late_dropout_after",
    "late_dropout_after_updates",
    "source_word_dropout",
    "target_word_dropout",
)


def init_source(init_from):
    """Where a fine-tuning run (`trainer.init_from`) starts: `(run_dir, weights_path, model)`, `model` the run's
    `model` settings (what `fine_tuned_model` takes the shape from).

    `init_from` is a run directory (its last epoch checkpoint) or a `.weights.h5` file in a run's `checkpoints/`
    (e.g. `average_last5.weights.h5` or `best.weights.h5`). Raises `KmtError` when it is neither.
    """
    from kmt.tokenizer import Vocabularies

    path = Path(init_from)
    if path.is_file():
        run_dir, weights = path.parent.parent, path
    elif path.is_dir():
        run_dir, weights = path, None
    else:
        raise KmtError(f"trainer.init_from={init_from}: no such run directory or weights file")
    run = RunDir(run_dir)
    if not run.config.is_file() or not Vocabularies.exists(run.tokenizer):
        raise KmtError(
            f"trainer.init_from={init_from}: {run_dir} is not a kmt run directory (no config.yaml and "
            "tokenizer/); pass a run directory or a .weights.h5 file in its checkpoints/"
        )
    weights = weights or run.checkpoints.find("last")
    return run_dir, weights, run.read_config().model


def fine_tuned_model(model_cfg, start_model) -> dict:
    """The `model` settings of a fine-tuning run: the shape of the model it starts from (`start_model`, every
    setting but `FINE_TUNABLE`), the dropouts of its own `model_cfg`. Logs the settings it takes that `model_cfg`
    has otherwise."""
    shape = {key: value for key, value in start_model.items() if key not in FINE_TUNABLE}
    taken = [f"model.{key}={value}" for key, value in shape.items() if key in model_cfg and model_cfg[key] != value]
    if taken:
        logger.info("fine-tuning keeps the shape of the model it starts from: %s", ", ".join(taken))
    return shape


def early_averaging_warning(count, epochs, run_root, kind="epoch"):
    """The warning to log when averaging the last `count` of a run's `epochs` checkpoints takes in more than half
    the run, else None. `kind` is what they count: `"epoch"`, or `"update checkpoint"` for a run that saves by
    updates (`trainer.save_every_updates`). A time budget decides how long a run is, so a recipe's window can
    outgrow a short run (docs/training.md, "Run length, validation and early stopping")."""
    if count <= 1 or 2 * count <= epochs:
        return None
    return (
        f"averaging the last {count} of the run's {epochs} {kind}s reaches back to {kind} {epochs - count + 1}, "
        f"whose early weights can pull the average down; choose trainer.average_last on val for a run this "
        f"short (python bench/decode_sweep.py {run_root} --average N)"
    )


def average_checkpoints(model, paths):
    """Loads each of `paths` into `model` in turn and leaves `model` holding their element-wise mean
    (Vaswani et al., 2017, section 6.1: the base model averages the last 5 checkpoints, the big one the last 20)."""
    if not paths:
        raise KmtError("no checkpoints to average")
    total = None
    for path in paths:
        load_weights(model, path)
        weights = [np.asarray(w, dtype=np.float64) for w in model.get_weights()]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    model.set_weights([(t / len(paths)).astype(w.dtype) for t, w in zip(total, model.get_weights())])
    logger.info("averaged %d checkpoints: %s", len(paths), ", ".join(p.name for p in paths))
    return model
