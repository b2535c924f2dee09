"""The keras-hub reference for bench/train_throughput.py: the paper's encoder-decoder assembled from keras-hub's
`TransformerEncoder` and `TransformerDecoder` layers, with the same inputs and outputs as `kmt.Transformer`.

Post-norm (`normalize_first=False`), dropout on residuals, embeddings and attention weights. One token embedding
serves source and target (a joint vocabulary, as in kmt); the pre-softmax projection is a separate `Dense`
(untied). Imports no TensorFlow, so it runs under JAX alone.
"""

import math

import keras
import keras_hub
from keras import ops


def build_keras_hub_transformer(vocab_size, num_layers, hidden_dim, num_heads, intermediate_dim, dropout):
    """Builds the reference model: inputs `source` `(B, S)` and `target_in` `(B, T)` int32 ids with pad id 0,
    output float32 logits `(B, T, V)`.

    Padding masks `(B, S)` and `(B, T)` are made once from the ids and passed explicitly; the decoder adds its own
    causal mask. Positions are keras-hub's `SinePositionEncoding`, added to the token embedding times sqrt(D).

    Args:
        vocab_size: int. Joint vocabulary size V.
        num_layers: int. Encoder and decoder layers each.
        hidden_dim: int. d_model D.
        num_heads: int. Attention heads H.
        intermediate_dim: int. Feed-forward inner size.
        dropout: float. Residual, embedding and attention dropout.

    Example:
    >>> model = build_keras_hub_transformer(100, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32,
    ...                                     dropout=0.1)
    >>> source = keras.ops.ones((2, 7), dtype="int32")
    >>> model({"source": source, "target_in": keras.ops.ones((2, 5), dtype="int32")}).shape
    (2, 5, 100)
    """
    source = keras.Input(shape=(None,), dtype="int32", name="source")
    target_in = keras.Input(shape=(None,), dtype="int32", name="target_in")
    source_padding = ops.not_equal(source, 0)  # (B, S), True at real tokens
    target_padding = ops.not_equal(target_in, 0)  # (B, T)

    token_embedding = keras.layers.Embedding(vocab_size, hidden_dim, name="token_embedding")
    position_encoding = keras_hub.layers.SinePositionEncoding(name="position_encoding")

    def embed(ids, name):
        tokens = token_embedding(ids) * math.sqrt(hidden_dim)  # (B, L, D)
        return keras.layers.Dropout(dropout, name=f"{name}_dropout")(tokens + position_encoding(tokens))

    x = embed(source, "source_embedding")  # (B, S, D)
    for i in range(num_layers):
        x = keras_hub.layers.TransformerEncoder(
            intermediate_dim, num_heads, dropout=dropout, normalize_first=False, name=f"encoder_layer_{i}"
        )(x, padding_mask=source_padding)

    y = embed(target_in, "target_embedding")  # (B, T, D)
    for i in range(num_layers):
        y = keras_hub.layers.TransformerDecoder(
            intermediate_dim, num_heads, dropout=dropout, normalize_first=False, name=f"decoder_layer_{i}"
        )(y, x, decoder_padding_mask=target_padding, encoder_padding_mask=source_padding)

    logits = keras.layers.Dense(vocab_size, name="output_projection")(y)  # (B, T, V)
    # Logits leave in float32 whatever the compute dtype, as kmt's do.
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
    return keras.Model(inputs={"source": source, "target_in": target_in}, outputs=logits, name="keras_hub_transformer")
