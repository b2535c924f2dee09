"""Tiny random Transformers and the arrays kmt.inference's test modules share."""

import keras
import numpy as np
from keras import ops

from kmt.models import Transformer

TINY = dict(vocab_size=20, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0, max_length=24)
UNTIED_PRE_NORM = dict(
    shared_embeddings=False, target_vocab_size=17, tied_output=False, norm_first=True, learned_positions=True
)
SOURCE = np.array([[5, 6, 7, 8, 9, 3, 0], [4, 4, 5, 3, 0, 0, 0], [7, 11, 13, 17, 19, 12, 3]], "int32")
PAD, START, END = 0, 2, 3


def to_numpy(x):
    return ops.convert_to_numpy(x)


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def random_model(**overrides):
    keras.utils.set_random_seed(1)
    return Transformer(**TINY | overrides)


def ensemble():
    """Two random models of different sizes over one vocabulary (source 20, target 17), pre-norm and post-norm."""
    first = random_model(num_layers=2, **UNTIED_PRE_NORM)
    keras.utils.set_random_seed(2)
    second = Transformer(
        **TINY
        | dict(
            hidden_dim=24,
            num_heads=3,
            intermediate_dim=40,
            shared_embeddings=False,
            target_vocab_size=17,
            tied_output=False,
        )
    )
    return [first, second]
