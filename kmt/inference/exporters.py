"""Export formats through a registry (OpenNMT-tf's `register_exporter`), and `export(run_dir, ...)`: a run's weights
(a checkpoint, the average of its last epochs, or several runs as an ensemble) written in one of them.

- `savedmodel`: a TensorFlow SavedModel, text in and text out, with the search settings baked in (what TF Serving
  and kmt-serve serve); the model may be an ensemble.
- `ctranslate2`: a CTranslate2 model directory (fast CPU and GPU decoding), float32 or quantized.

A new format is a subclass of `Exporter` registered under its name.
"""

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kmt.errors import KmtError
from kmt.inference.settings import SearchSettings

_EXPORTERS: dict[str, type["Exporter"]] = {}


def register_exporter(name: str):
    """A class decorator: registers an `Exporter` subclass as format `name` (`kmt.export(..., format=name)`)."""

    def register(cls):
        cls.name = name
        _EXPORTERS[name] = cls
        return cls

    return register


def exporter(name: str, **options) -> "Exporter":
    """The registered exporter of format `name`, made with its `options`; a `KmtError` names the formats known."""
    if name not in _EXPORTERS:
        raise KmtError(f"unknown export format {name!r}; choose one of {', '.join(_EXPORTERS)}")
    return _EXPORTERS[name](**options)


class Exporter:
    """Writes models in one format. `check` refuses what the format cannot hold before any model loads;
    `export` writes the format's directory; `default_output(run)` is where it goes unless told."""

    name = ""
    ensembles = False  # whether one export can decode with several models

    def check(self, settings, ensemble: bool, models_arch: str) -> None:
        if ensemble and not self.ensembles:
            raise KmtError(f"format {self.name!r} exports one run; an ensemble is a SavedModel option")

    def default_output(self, run) -> Path:
        raise NotImplementedError

    def export(self, models: Sequence[Any], vocabularies, settings, output: Path) -> None:
        raise NotImplementedError


@register_exporter("savedmodel")
class SavedModelExporter(Exporter):
    ensembles = True

    def __init__(self, quantization: str | None = None):
        if quantization is not None:
            raise KmtError("quantization is for format ctranslate2; a SavedModel keeps float32 weights")

    def default_output(self, run):
        return run.export

    def export(self, models, vocabularies, settings, output):
        from kmt.inference.export import export_translator
        from kmt.inference.translator import TranslatorModule

        export_translator(TranslatorModule(list(models), vocabularies, settings), output)


@register_exporter("ctranslate2")
class CTranslate2Exporter(Exporter):
    def __init__(self, quantization: str | None = None):
        from kmt.inference.ctranslate2 import QUANTIZATIONS, require_ctranslate2

        if quantization is not None and quantization not in QUANTIZATIONS:
            raise KmtError(
                f"unknown quantization {quantization!r}; choose one of {', '.join(QUANTIZATIONS)} "
                "(or leave it out for float32)"
            )
        require_ctranslate2()
        self.quantization = quantization

    def check(self, settings, ensemble, models_arch):
        super().check(settings, ensemble, models_arch)
        settings.strategy.require(self.name)  # what the strategy says it decodes in
        if models_arch != "transformer":
            raise KmtError(
                f"format ctranslate2 converts Transformers only; this run trained model.arch="
                f"{models_arch} (export it as a SavedModel)"
            )

    def default_output(self, run):
        return run.root / "_".join(["ctranslate2", *filter(None, [self.quantization])])

    def export(self, models, vocabularies, settings, output):
        from kmt.inference.ctranslate2 import export_ctranslate2

        export_ctranslate2(models[0], vocabularies, settings, output, self.quantization)


def search_settings(decode_cfg, search: Any = None) -> SearchSettings:
    """The search settings an export bakes in: the run's `decode` config, or `search` (whole `SearchSettings`, or a
    mapping of the settings to change, those None left as they are)."""
    if isinstance(search, SearchSettings):
        return search
    return SearchSettings.from_config(decode_cfg).replace(**dict(search or {}))


def export(
    run_dir: str | os.PathLike,
    *,
    checkpoint: str = "last",
    average: int | None = None,
    ensemble: Sequence[str | os.PathLike] = (),
    search: Any = None,
    format: str = "savedmodel",
    output: str | os.PathLike | None = None,
    quantization: str | None = None,
) -> Path:
    """Exports a run's weights; returns the directory written.

    The run's `config.yaml` and `tokenizer/` rebuild the model. Everything a mistake could be in (the format and
    its options, the search settings, each run's vocabulary, the weights files asked for) is checked before any
    model loads or any averaged checkpoint is written.

    Args:
        run_dir: a run directory (what `kmt.train` or `kmt-train` wrote).
        checkpoint: `"last"` (the newest epoch), `"best"` (the best `trainer.monitor`), or a `.weights.h5` path.
            Defaults to `"last"`.
        average: average the last N epoch checkpoints instead (also saved as
            `checkpoints/average_last{N}.weights.h5`). Defaults to `None`.
        ensemble: other runs sharing this run's vocabulary, each at the same `checkpoint` (`last` or `best`) or
            `average`: the export scores each next token by the mean of the models' probabilities. Defaults to `()`.
        search: the `SearchSettings` to bake in instead of the run's `decode` ones, or a mapping of those to change
            (e.g. `{"beam_size": 1}`). Defaults to `None`.
        format: a registered export format: `"savedmodel"` or `"ctranslate2"`. Defaults to `"savedmodel"`.
        output: where to write it. Defaults to the run's `export/` (a SavedModel) or `ctranslate2[_QUANTIZATION]/`.
        quantization: format ctranslate2: `"int8"`, `"int16"`, `"float16"` and the like. Defaults to `None`
            (float32).
    """
    from kmt.checkpoints import average_checkpoints, load_run_model
    from kmt.run_dir import RunDir, write_atomically
    from kmt.tokenizer import Vocabularies

    writer = exporter(format, quantization=quantization)
    others = [Path(other) for other in ensemble]
    if others and checkpoint not in ("last", "best"):
        raise KmtError(
            f"an ensemble loads every run at checkpoint last or best (or an average), not one run's "
            f"weights file. Received: checkpoint={checkpoint}"
        )
    run = RunDir(run_dir)
    cfg = run.read_config()
    settings = search_settings(cfg.decode, search)
    writer.check(settings, bool(others), cfg.model.get("arch", "transformer"))
    vocabularies = Vocabularies.load(run.tokenizer)
    for other in map(RunDir, others):
        other.read_config()  # a run directory
        if not Vocabularies.load(other.tokenizer).same_as(vocabularies):
            raise KmtError(
                f"ensemble: {other.root} has another vocabulary than {run_dir}; an ensemble's runs must "
                "share one (train them on the same data with the same data.tokenizer settings)"
            )
    members = [Path(run_dir), *others]
    weights = [  # each run's weights files: the last N epochs to average, or the one checkpoint
        RunDir(member).checkpoints.last(average) if average else [RunDir(member).checkpoints.find(checkpoint)]
        for member in members
    ]
    models = []
    for member, paths in zip(members, weights):
        model = load_run_model(member, paths[-1])[2]
        if average:
            average_checkpoints(model, paths)
            write_atomically(RunDir(member).checkpoints.averaged(average), model.save_weights)
        models.append(model)
    output = Path(output) if output is not None else writer.default_output(run)
    writer.export(models, vocabularies, settings, output)
    return output
