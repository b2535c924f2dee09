"""`build_lstm`: the attention encoder-decoder that the Transformer replaced, as a functional `keras.Model` with the
Transformer's inputs and outputs, and `lstm_parts(model)`: its encoder, decoder and output projection as decoding
calls them."""

import keras
from keras import ops

from kmt.layers import Dropout
from kmt.layers.masks import padding_mask, source_attention_mask, source_padding_mask
from kmt.layers.recurrent import AttentionDecoder, TokenEmbedding


def build_lstm(
    vocab_size,
    num_layers=2,
    hidden_dim=256,
    dropout=0.2,
    max_length=256,
    *,
    num_decoder_layers=None,
    target_vocab_size=None,
    shared_embeddings=True,
    tied_output=True,
    score="general",
    name="lstm",
):
    """Builds a bidirectional-LSTM encoder and an LSTM decoder with Luong attention and input feeding (Luong et
    al., 2015; the encoder of Bahdanau et al., 2015), the recurrent baseline of "Attention Is All You Need".

    Inputs and output are `build_transformer`'s: int32 `source` `(B, S)` and `target_in` `(B, T)`, pad id 0, to
    float32 logits `(B, T, V_target)`. Each encoder layer is a `keras.layers.Bidirectional` LSTM of `hidden_dim / 2`
    units a direction that skips padding (`mask=`), so its states `(B, S, D)` at real positions do not depend on
    how much padding follows; the decoder is an `AttentionDecoder`. Embeddings, the encoder's outputs between layers
    and the decoder's attentional vectors are dropped out at `dropout`. Every size is `hidden_dim`, so the output
    projection can always be the target embedding transposed (`tied_output`).

    A saved `.keras` file keeps the layer names `source_embedding`, `target_embedding` (when not shared),
    `encoder_layer_{i}`, `lstm_decoder` and `output_projection` (untied output only), from which a loaded model's
    parts are found again (`lstm_parts`).

    Args:
        vocab_size: int. Source vocabulary size (the joint vocabulary when embeddings are shared).
        num_layers: int. Encoder layers (and decoder layers unless `num_decoder_layers`). Defaults to `2`.
        hidden_dim: int. D: embedding, encoder state (both directions) and decoder size; even. Defaults to `256`.
        dropout: float. Defaults to `0.2`.
        max_length: int. Longest sequence the model is meant for (decoding limits). Defaults to `256`.
        num_decoder_layers: int or None. Defaults to `num_layers`.
        target_vocab_size: int or None. Defaults to `vocab_size`.
        shared_embeddings: bool. One embedding for source and target. Defaults to `True`.
        tied_output: bool. The pre-softmax projection is the target embedding transposed. Defaults to `True`.
        score: str. Luong's attention score, "general" or "dot". Defaults to `"general"`.
        name: str. Defaults to `"lstm"`.

    Example:
    >>> model = build_lstm(vocab_size=100, num_layers=1, hidden_dim=16)
    >>> source = keras.ops.ones((2, 7), dtype="int32")
    >>> tuple(model({"source": source, "target_in": keras.ops.ones((2, 5), dtype="int32")}).shape)
    (2, 5, 100)
    """
    target_vocab_size = target_vocab_size or vocab_size
    num_decoder_layers = num_decoder_layers or num_layers
    if hidden_dim % 2:
        raise ValueError(f"hidden_dim must be even (half a direction). Received: hidden_dim={hidden_dim}")
    if shared_embeddings and target_vocab_size != vocab_size:
        raise ValueError(
            "shared_embeddings=True needs one joint vocabulary. "
            f"Received: vocab_size={vocab_size}, target_vocab_size={target_vocab_size}"
        )
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1). Received: dropout={dropout}")

    source = keras.Input(shape=(None,), dtype="int32", name="source")
    target_in = keras.Input(shape=(None,), dtype="int32", name="target_in")
    source_mask = keras.layers.Lambda(source_attention_mask, name="source_attention_mask")(source)  # (B, 1, S)
    real = keras.layers.Lambda(source_padding_mask, name="source_padding_mask")(source)  # (B, S)

    source_embedding = TokenEmbedding(vocab_size, hidden_dim, name="source_embedding")
    target_embedding = source_embedding if shared_embeddings else \
        TokenEmbedding(target_vocab_size, hidden_dim, name="target_embedding")

    x = Dropout(dropout, name="source_embedding_dropout")(source_embedding(source))  # (B, S, D)
    encoder_layers = [_encoder_layer(hidden_dim, i) for i in range(num_layers)]
    for i, layer in enumerate(encoder_layers):
        x = layer(x, mask=real)  # (B, S, D)
        if i < num_layers - 1:
            x = Dropout(dropout, name=f"encoder_dropout_{i}")(x)

    y = Dropout(dropout, name="target_embedding_dropout")(target_embedding(target_in))  # (B, T, D)
    decoder = AttentionDecoder(hidden_dim, num_decoder_layers, score=score, max_length=max_length,
                               name="lstm_decoder")
    y = Dropout(dropout, name="decoder_dropout")(decoder(y, x, source_mask))  # (B, T, D)

    output_projection = None if tied_output else keras.layers.Dense(target_vocab_size, name="output_projection")
    logits = output_projection(y) if output_projection else target_embedding(y, reverse=True)  # (B, T, V)
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
    model = keras.Model(inputs={"source": source, "target_in": target_in}, outputs=logits, name=name)
    model.lstm_parts = LSTMParts(source_embedding, target_embedding, encoder_layers, decoder, output_projection)
    return model


def _encoder_layer(hidden_dim, index):
    return keras.layers.Bidirectional(
        keras.layers.LSTM(hidden_dim // 2, return_sequences=True), name=f"encoder_layer_{index}"
    )


class LSTMParts:
    """A `build_lstm` model's encoder, decoder and output projection, to run the decoder a step at a time, with the
    methods decoding needs of any model (`TransformerParts` has the same): `max_length`, `encode` and `logits`.
    Plain Python, not a Keras object: saving the model ignores it."""

    def __init__(self, source_embedding, target_embedding, encoder_layers, decoder, output_projection=None):
        self.source_embedding = source_embedding
        self.target_embedding = target_embedding
        self.encoder_layers = list(encoder_layers)
        self.decoder = decoder
        self.output_projection = output_projection

    @property
    def max_length(self):
        """The longest target the model is meant for (its decoder's `max_length`)."""
        return self.decoder.max_length

    def encode(self, source):
        """The encoder (no dropout): int `source` `(B, S)` -> (outputs `(B, S, D)`, mask `(B, 1, S)`)."""
        x = self.source_embedding(source)  # (B, S, D)
        real = padding_mask(source)  # (B, S)
        for layer in self.encoder_layers:
            x = layer(x, mask=real, training=False)
        return x, source_attention_mask(source)

    def decode(self, target_in, encoder_outputs, source_mask):
        """The decoder (no dropout) over all of `target_in` `(N, T)`: attentional vectors `(N, T, D)`."""
        return self.decoder(self.target_embedding(target_in), encoder_outputs, source_mask)

    def logits(self, states):
        """The output projection: (B, ..., D) -> float32 (B, ..., V)."""
        projected = self.output_projection(states) if self.output_projection else \
            self.target_embedding(states, reverse=True)
        return ops.cast(projected, "float32")

    @classmethod
    def of_loaded(cls, model):
        """The parts of a `build_lstm` model loaded from a `.keras` file, found by the layer names it keeps."""
        layers = {layer.name: layer for layer in model.layers}
        encoder_layers = [layers[f"encoder_layer_{i}"] for i in range(len(layers)) if f"encoder_layer_{i}" in layers]
        return cls(layers["source_embedding"], layers.get("target_embedding", layers["source_embedding"]),
                   encoder_layers, layers["lstm_decoder"], layers.get("output_projection"))


def lstm_parts(model):
    """`model`'s `LSTMParts` when it is a `build_lstm` model (made here, or loaded: found once and kept on the
    model), else None."""
    parts = getattr(model, "lstm_parts", None)
    if isinstance(parts, LSTMParts):
        return parts
    if not any(isinstance(layer, AttentionDecoder) for layer in getattr(model, "layers", ())):
        return None
    model.lstm_parts = LSTMParts.of_loaded(model)
    return model.lstm_parts
