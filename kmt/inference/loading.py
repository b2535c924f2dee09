"""`load_translator(path)`: the one place that tells what kind of model a path holds and opens it as a
`kmt.inference.translators.Translator`.

Three kinds: a kmt-train run directory (`config.yaml`, `tokenizer/`, `checkpoints/`: the Keras model, any backend),
a SavedModel export (`saved_model.pb`: a run's `export/`, or `kmt-export`'s output) and a CTranslate2 directory
(`kmt-export --format ctranslate2`). Anything else is a `KmtError` of one line.
"""

from pathlib import Path

from kmt.errors import KmtError
from kmt.inference.ctranslate2 import is_ctranslate2_dir, require_ctranslate2
from kmt.inference.translators import Translator

KINDS = ("run", "savedmodel", "ctranslate2")


def translator_kind(path) -> str:
    """`"run"`, `"savedmodel"` or `"ctranslate2"`: the kind of model at `path` (cheap: nothing is loaded, and for a
    CTranslate2 directory the library is checked to be installed); a `KmtError` for anything else."""
    path = Path(path)
    if is_ctranslate2_dir(path):
        require_ctranslate2()  # one line naming the extra, when it is missing
        return "ctranslate2"
    if (path / "saved_model.pb").is_file():
        return "savedmodel"
    if (path / "config.yaml").is_file():
        return "run"
    raise KmtError(
        f"{path} is not a kmt run directory (config.yaml), SavedModel export (saved_model.pb) "
        "or CTranslate2 directory; pass a run, its export/ or the output of kmt-export --format "
        "ctranslate2"
    )


def load_translator(
    path,
    *,
    checkpoint: str | None = None,
    batch_size: int = 64,
    device: str = "cpu",
    compute_type: str = "default",
    threads: int = 0,
) -> Translator:
    """The `Translator` of the model at `path`: a run directory's Keras model (`KerasTranslator`, searching with the
    run's `decode` settings), a SavedModel export (`SavedModelTranslator`) or a CTranslate2 directory
    (`CT2Translator`, searching with its exported settings).

    Args:
        path: a run directory, a SavedModel directory or a CTranslate2 directory.
        checkpoint: a run directory's weights (see `load_run_translator`); only for a run. Defaults to `None`.
        batch_size: sentences per batch. Defaults to `64`.
        device, compute_type, threads: CTranslate2's device (`"cpu"`, `"cuda"`, `"auto"`), compute type and CPU
            threads, each decoding its part of a batch (0: one per core); other kinds run where Keras or TensorFlow
            places them. Default to `"cpu"`, `"default"` and `0`.
    """
    kind = translator_kind(path)
    if checkpoint is not None and kind != "run":
        raise KmtError(f"checkpoint {checkpoint!r} picks a run directory's weights; {path} is a {kind} export")
    if kind == "ctranslate2":
        from kmt.inference.ctranslate2 import CT2Translator

        return CT2Translator(
            path, device=device, compute_type=compute_type, inter_threads=threads, batch_size=batch_size
        )
    if kind == "savedmodel":
        from kmt.inference.saved_model_translator import SavedModelTranslator

        return SavedModelTranslator(path, batch_size=batch_size)
    return load_run_translator(path, checkpoint=checkpoint, batch_size=batch_size)


def load_run_translator(path, *, checkpoint: str | None = None, batch_size: int = 64) -> Translator:
    """A `KerasTranslator` of a run directory: its model rebuilt in float32 from `config.yaml` and `tokenizer/`,
    searching with its `decode` settings.

    Args:
        path: a kmt-train run directory.
        checkpoint: `"last"`, `"best"` or a `.weights.h5` path. Defaults to `None`: the weights the run scored and
            exported (the average of its last `trainer.average_last` epochs when it averaged, else the last epoch).
        batch_size: sentences per batch. Defaults to `64`.
    """
    from kmt.checkpoints import load_run_model
    from kmt.inference.keras_translator import KerasTranslator
    from kmt.inference.settings import SearchSettings
    from kmt.run_dir import RunDir

    if checkpoint is None:
        run = RunDir(path)
        averaged = run.checkpoints.averaged(run.read_config().trainer.average_last)
        checkpoint = str(averaged) if averaged.is_file() else "last"
    cfg, vocabularies, model = load_run_model(path, checkpoint)
    return KerasTranslator(model, vocabularies, SearchSettings.from_config(cfg.decode), batch_size=batch_size)
