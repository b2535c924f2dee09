"""kmt's encoder-decoder models: `Seq2SeqModel` (the base, whose decoding face is methods), `Transformer`, `LSTM`,
and the registry from `model.arch` to a class (`register_model`, `model_class`).

The registry imports no Keras (a config is validated without it); the classes import Keras when first used."""

import importlib

from kmt.models.registry import model_archs, model_class, register_model

_LAZY = {"Seq2SeqModel": "kmt.models.base", "Transformer": "kmt.models.transformer", "LSTM": "kmt.models.lstm"}
__all__ = ["LSTM", "Seq2SeqModel", "Transformer", "model_archs", "model_class", "register_model"]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'kmt.models' has no attribute '{name}'")
    return getattr(importlib.import_module(_LAZY[name]), name)
