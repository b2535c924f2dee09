"""kmt: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as Keras 3 layers, for translation.

The library's face, imported when first used: `kmt.compose_config`, `kmt.train`, `kmt.load`, `kmt.export` and
`kmt.evaluate` (`kmt.api`), `kmt.import_marian` (`kmt.importers.marian`, an OPUS-MT checkpoint as a run),
`kmt.translate_file` (`kmt.documents`, a .txt, .html or .srt file with its layout kept), and
`kmt.SearchSettings` (`kmt.inference.settings`) and `kmt.Glossary` (`kmt.inference.glossary`); also the models
(`kmt.Transformer`, `kmt.LSTM`, `kmt.models`), `kmt.layers`, `kmt.losses` and `kmt.schedule`.

`import kmt` is cheap and changes nothing in the process: it imports neither Keras nor TensorFlow (which alone takes
seconds), so a command that needs neither (kmt-plot, kmt-serve until it has opened its port, kmt-translate on a
CTranslate2 directory) starts at once. kmt's Keras objects are registered by the modules that define them, so a
saved `model.keras` loads with `keras.saving.load_model(path)` (safe mode on) once its model's class is imported
(`from kmt.models import Transformer`; `kmt.load` does it for a run directory). kmt's commands also keep
TensorFlow's native start-up lines out of their output (`kmt._startup.quiet_startup`, turned on by `kmt.cli`).
"""

import importlib

__version__ = "0.1.0"

_LAZY = {
    "compose_config": "kmt.api",
    "train": "kmt.api",
    "load": "kmt.api",
    "export": "kmt.api",
    "evaluate": "kmt.api",
    "import_marian": "kmt.importers.marian",
    "translate_file": "kmt.documents",
    "SearchSettings": "kmt.inference.settings",
    "Glossary": "kmt.inference.glossary",
    "Transformer": "kmt.models.transformer",
    "LSTM": "kmt.models.lstm",
    "models": "kmt.models",
    "layers": "kmt.layers",
    "losses": "kmt.losses",
    "schedule": "kmt.schedule",
}
__all__ = [
    "Glossary",
    "SearchSettings",
    "compose_config",
    "evaluate",
    "export",
    "import_marian",
    "load",
    "train",
    "translate_file",
]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'kmt' has no attribute '{name}'")
    module = importlib.import_module(_LAZY[name])
    return module if _LAZY[name] == f"kmt.{name}" else getattr(module, name)
