"""The registry from `model.arch` (the config's value) to a `Seq2SeqModel` class.

A new architecture is one module with its class and one `register_model` line (or, for one of kmt's own, one entry in
`BUILTIN`, imported when first asked for, so validating a config imports no Keras)."""

import importlib

BUILTIN = {"transformer": "kmt.models.transformer", "lstm": "kmt.models.lstm"}  # arch -> the module registering it
_MODELS = {}


def register_model(arch: str):
    """A class decorator: `@register_model("mine")` makes `model.arch=mine` build that `Seq2SeqModel` subclass."""

    def register(cls):
        _MODELS[arch] = cls
        return cls

    return register


def model_archs() -> list:
    """The names `model.arch` may take: kmt's own and those registered since."""
    return sorted(set(BUILTIN) | set(_MODELS))


def model_class(arch: str):
    """The `Seq2SeqModel` subclass registered as `arch`; `ValueError` naming the choices when there is none."""
    if arch not in _MODELS and arch in BUILTIN:
        importlib.import_module(BUILTIN[arch])
    if arch not in _MODELS:
        raise ValueError(f"model.arch must be one of {', '.join(model_archs())}. Received: {arch!r}")
    return _MODELS[arch]
