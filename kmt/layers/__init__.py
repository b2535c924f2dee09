"""The Transformer's layers and the recurrent baseline's (`recurrent.py`), in pure Keras 3 (`keras.ops` only:
TensorFlow, JAX and PyTorch backends)."""

from kmt.layers.alignment import GuidedAlignment
from kmt.layers.attention import MultiHeadAttention
from kmt.layers.decoder import DecoderLayer
from kmt.layers.dropout import Dropout
from kmt.layers.embedding import Bias, PositionalEmbedding, positional_encoding, sinusoids
from kmt.layers.encoder import EncoderLayer
from kmt.layers.feedforward import FeedForward
from kmt.layers.masks import (
    MASK_VALUE,
    causal_mask,
    padding_mask,
    source_attention_mask,
    source_padding_mask,
    target_attention_mask,
)
from kmt.layers.recurrent import AttentionDecoder, TokenEmbedding

__all__ = [
    "MASK_VALUE",
    "AttentionDecoder",
    "Bias",
    "DecoderLayer",
    "Dropout",
    "EncoderLayer",
    "FeedForward",
    "GuidedAlignment",
    "MultiHeadAttention",
    "PositionalEmbedding",
    "TokenEmbedding",
    "causal_mask",
    "padding_mask",
    "positional_encoding",
    "sinusoids",
    "source_attention_mask",
    "source_padding_mask",
    "target_attention_mask",
]
