"""`build_transformer`: the paper's encoder-decoder assembled from kmt's layers as a functional `keras.Model`, and
`transformer_parts(model)`: its encoder, decoder and output projection as decoding calls them."""

import keras
from keras import ops

from kmt.layers import DecoderLayer, Dropout, EncoderLayer, PositionalEmbedding
from kmt.layers.attention import check_divisible
from kmt.layers.masks import source_attention_mask, target_attention_mask


def build_transformer(
    vocab_size,
    num_layers=6,
    hidden_dim=512,
    num_heads=8,
    intermediate_dim=2048,
    dropout=0.1,
    max_length=256,
    *,
    num_decoder_layers=None,
    target_vocab_size=None,
    shared_embeddings=True,
    tied_output=True,
    norm_first=False,
    attention_dropout=0.0,
    activation_dropout=0.0,
    learned_positions=False,
    source_word_dropout=0.0,
    target_word_dropout=0.0,
    layer_norm_epsilon=1e-5,
    name="transformer",
):
    """Builds the Transformer of "Attention Is All You Need" (Vaswani et al., 2017, figure 1).

    Inputs are two int32 tensors, `source` `(B, S)` and `target_in` `(B, T)` (the target shifted right behind a
    start token), with pad id 0; the output is float32 logits `(B, T, V_target)`. Masks are built once here from
    the ids and passed down. With the defaults the three embedding matrices are one (section 3.4): source
    embedding, target embedding and pre-softmax projection share a joint vocabulary.

    The model carries its `TransformerParts` (`transformer_parts(model)`): the encoder, the decoder and the output
    projection that decoding runs step by step. A saved `.keras` file keeps the layer names `source_embedding`,
    `target_embedding` (when not shared), `encoder_layer_{i}`, `decoder_layer_{i}`, `encoder_norm` and
    `decoder_norm` (pre-norm only) and `output_projection` (untied output only), from which a loaded model's parts
    are found again.

    Args:
        vocab_size: int. Source vocabulary size (the joint vocabulary when embeddings are shared).
        num_layers: int. Encoder layers N (and decoder layers unless `num_decoder_layers`). Defaults to `6`.
        hidden_dim: int. Model size d_model. Defaults to `512`.
        num_heads: int. Attention heads h; must divide `hidden_dim`. Defaults to `8`.
        intermediate_dim: int. Feed-forward inner size d_ff. Defaults to `2048`.
        dropout: float. Residual and embedding dropout P_drop. Defaults to `0.1`.
        max_length: int. Longest sequence the model is meant for (learned positions, decoding limits).
            Defaults to `256`.
        num_decoder_layers: int or None. Defaults to `num_layers`.
        target_vocab_size: int or None. Target vocabulary size. Defaults to `vocab_size`.
        shared_embeddings: bool. One embedding for source and target (needs one joint vocabulary).
            Defaults to `True`.
        tied_output: bool. The pre-softmax projection is the target embedding transposed. Defaults to `True`.
        norm_first: bool. Pre-norm layers plus a final LayerNorm on each stack. Defaults to `False`.
        attention_dropout: float. Dropout on attention weights. Defaults to `0.0`.
        activation_dropout: float. Dropout after the feed-forward ReLU. Defaults to `0.0`.
        learned_positions: bool. Learned instead of sinusoidal positions. Defaults to `False`.
        source_word_dropout: float. Word dropout on the source (Gal & Ghahramani, 2016; Sennrich & Zhang, 2019):
            in training, each source token's whole embedded vector (token and position) is zeroed with this
            probability, the rest scaled by 1 / (1 - rate). Defaults to `0.0` (no layer is added).
        target_word_dropout: float. The same on the decoder's input (the shifted target). Defaults to `0.0`.
        layer_norm_epsilon: float. Defaults to `1e-5`.
        name: str. Defaults to `"transformer"`.

    Example:
    >>> model = build_transformer(vocab_size=100, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32)
    >>> source = keras.ops.ones((2, 7), dtype="int32")
    >>> tuple(model({"source": source, "target_in": keras.ops.ones((2, 5), dtype="int32")}).shape)
    (2, 5, 100)
    """
    check_divisible(hidden_dim, num_heads)
    target_vocab_size = target_vocab_size or vocab_size
    num_decoder_layers = num_decoder_layers or num_layers
    if shared_embeddings and target_vocab_size != vocab_size:
        raise ValueError(
            "shared_embeddings=True needs one joint vocabulary. "
            f"Received: vocab_size={vocab_size}, target_vocab_size={target_vocab_size}"
        )
    for rate_name, rate in [
        ("dropout", dropout),
        ("attention_dropout", attention_dropout),
        ("activation_dropout", activation_dropout),
        ("source_word_dropout", source_word_dropout),
        ("target_word_dropout", target_word_dropout),
    ]:
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"{rate_name} must be in [0, 1). Received: {rate_name}={rate}")
    layer_args = dict(
        hidden_dim=hidden_dim,
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        dropout=dropout,
        attention_dropout=attention_dropout,
        activation_dropout=activation_dropout,
        norm_first=norm_first,
        layer_norm_epsilon=layer_norm_epsilon,
    )

    def embedding(vocab, embedding_name):
        return PositionalEmbedding(
            vocab, hidden_dim, max_length=max_length, learned_positions=learned_positions, name=embedding_name
        )

    source = keras.Input(shape=(None,), dtype="int32", name="source")
    target_in = keras.Input(shape=(None,), dtype="int32", name="target_in")
    source_mask = keras.layers.Lambda(source_attention_mask, name="source_attention_mask")(source)  # (B, 1, S)
    target_mask = keras.layers.Lambda(target_attention_mask, name="target_attention_mask")(target_in)  # (B, T, T)

    source_embedding = embedding(vocab_size, "source_embedding")
    target_embedding = source_embedding if shared_embeddings else embedding(target_vocab_size, "target_embedding")

    def embedded(layer, ids, side, word_dropout):
        # The Dropout layers are made before the embedding is called (and makes its weights), as they always were:
        # each takes a seed from the global generator, so this order keeps a seed's weights and masks what they were.
        embedding_dropout = Dropout(dropout, name=f"{side}_embedding_dropout")
        h = layer(ids)  # (B, L, D)
        if word_dropout:  # one draw a position: noise shape (B, L, 1)
            h = Dropout(word_dropout, noise_shape=(None, None, 1), name=f"{side}_word_dropout")(h)
        return embedding_dropout(h)

    x = embedded(source_embedding, source, "source", source_word_dropout)  # (B, S, D)
    encoder_layers = [EncoderLayer(**layer_args, name=f"encoder_layer_{i}") for i in range(num_layers)]
    for layer in encoder_layers:
        x = layer(x, attention_mask=source_mask)
    encoder_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm") if norm_first \
        else None
    if encoder_norm:
        x = encoder_norm(x)

    y = embedded(target_embedding, target_in, "target", target_word_dropout)  # (B, T, D)
    decoder_layers = [DecoderLayer(**layer_args, name=f"decoder_layer_{i}") for i in range(num_decoder_layers)]
    for layer in decoder_layers:
        y = layer(y, x, self_attention_mask=target_mask, cross_attention_mask=source_mask)
    decoder_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="decoder_norm") if norm_first \
        else None
    if decoder_norm:
        y = decoder_norm(y)

    output_projection = None if tied_output else keras.layers.Dense(target_vocab_size, name="output_projection")
    logits = output_projection(y) if output_projection else target_embedding(y, reverse=True)  # (B, T, V)
    # Logits leave in float32 whatever the compute dtype, so the softmax and the loss are computed in float32.
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
    model = keras.Model(inputs={"source": source, "target_in": target_in}, outputs=logits, name=name)
    model.transformer_parts = TransformerParts(
        source_embedding, target_embedding, encoder_layers, decoder_layers, encoder_norm, decoder_norm,
        output_projection,
    )
    return model


class TransformerParts:
    """A `build_transformer` model's encoder, decoder and output projection, to run the decoder a step at a time
    (flax's `Transformer.encode` / `decode`). Plain Python, not a Keras object: saving the model ignores it.

    Args:
        source_embedding, target_embedding: `PositionalEmbedding`s (one layer when shared).
        encoder_layers, decoder_layers: lists of `EncoderLayer` and `DecoderLayer`, in order.
        encoder_norm, decoder_norm: the stacks' final `LayerNormalization`s (pre-norm), or None.
        output_projection: the untied pre-softmax `Dense`, or None for the target embedding transposed.
    """

    def __init__(self, source_embedding, target_embedding, encoder_layers, decoder_layers, encoder_norm=None,
                 decoder_norm=None, output_projection=None):
        self.source_embedding = source_embedding
        self.target_embedding = target_embedding
        self.encoder_layers = list(encoder_layers)
        self.decoder_layers = list(decoder_layers)
        self.encoder_norm = encoder_norm
        self.decoder_norm = decoder_norm
        self.output_projection = output_projection

    @property
    def max_length(self):
        """The longest target the model is meant for (its target embedding's `max_length`)."""
        return self.target_embedding.max_length

    def encode(self, source):
        """The encoder (no dropout): int `source` `(B, S)` -> (outputs `(B, S, D)`, mask `(B, 1, S)`)."""
        source_mask = source_attention_mask(source)  # (B, 1, S)
        x = self.source_embedding(source)  # (B, S, D)
        for layer in self.encoder_layers:
            x = layer(x, attention_mask=source_mask, training=False)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x, source_mask

    def cross_caches(self, encoder_outputs):
        """Each decoder layer's cross-attention keys and values, projected once: a list of `(B, 2, S, H, D/H)`."""
        return [layer.cross_attention.compute_cache(encoder_outputs) for layer in self.decoder_layers]

    def empty_caches(self, rows, length):
        """Each decoder layer's self-attention cache for `length` positions, zeros: a list of `(N, 2, L, H, D/H)`."""
        return [
            ops.zeros((rows, 2, length, layer.num_heads, layer.hidden_dim // layer.num_heads), layer.compute_dtype)
            for layer in self.decoder_layers
        ]

    def decode(self, target_in, encoder_outputs, source_mask, self_attention_mask, *, start_index=0, caches=None,
               cross_caches=None):
        """The decoder stack (no dropout) over `target_in` `(N, T)` placed at `start_index`: decoder states
        `(N, T, D)` before the final norm. With `caches` (`empty_caches`) and `cross_caches`, each layer attends
        to its cache, writes this call's keys and values into it at `start_index`, and the updated caches come
        back too: `(states, caches)`."""
        y = self.target_embedding(target_in, start_index=start_index)  # (N, T, D)
        if caches is None:
            for layer in self.decoder_layers:
                y = layer(y, encoder_outputs, self_attention_mask=self_attention_mask,
                          cross_attention_mask=source_mask, training=False)
            return y
        updated = []
        for layer, cache, cross_cache in zip(self.decoder_layers, caches, cross_caches):
            y, cache, _ = layer(
                y,
                self_attention_mask=self_attention_mask,
                cross_attention_mask=source_mask,
                self_attention_cache=cache,
                self_attention_cache_update_index=start_index,
                cross_attention_cache=cross_cache,
                training=False,
            )
            updated.append(cache)
        return y, updated

    def logits(self, states):
        """Final decoder norm (pre-norm models), then the output projection: (B, T, D) -> float32 (B, T, V)."""
        if self.decoder_norm is not None:
            states = self.decoder_norm(states)
        projected = self.output_projection(states) if self.output_projection else \
            self.target_embedding(states, reverse=True)
        return ops.cast(projected, "float32")

    @classmethod
    def of_loaded(cls, model):
        """The parts of a `build_transformer` model loaded from a `.keras` file, found by the layer names the file
        keeps (see `build_transformer`)."""
        layers = {layer.name: layer for layer in model.layers}

        def stack(prefix):  # prefix_0, prefix_1, ... in order
            return [layers[f"{prefix}_{i}"] for i in range(len(layers)) if f"{prefix}_{i}" in layers]

        encoder_layers, decoder_layers = stack("encoder_layer"), stack("decoder_layer")
        if "source_embedding" not in layers or not encoder_layers or not decoder_layers:
            raise ValueError(
                "Decoding needs a model from kmt.model.build_transformer (layers source_embedding, encoder_layer_0, "
                f"decoder_layer_0, ...). Received: model {model.name!r} with layers {sorted(layers)}"
            )
        return cls(layers["source_embedding"], layers.get("target_embedding", layers["source_embedding"]),
                   encoder_layers, decoder_layers, layers.get("encoder_norm"), layers.get("decoder_norm"),
                   layers.get("output_projection"))


def transformer_parts(model):
    """`model`'s `TransformerParts`: made by `build_transformer`, or, for a model loaded from a `.keras` file, found
    once by `TransformerParts.of_loaded` and kept on the model."""
    parts = getattr(model, "transformer_parts", None)
    if not isinstance(parts, TransformerParts):
        parts = TransformerParts.of_loaded(model)
        model.transformer_parts = parts
    return parts


def residual_dropouts(model):
    """The Dropout layers (`kmt.layers.Dropout`) whose rate is `build_transformer`'s `dropout` (P_drop): on the
    embeddings and on every sublayer's output before its residual connection; not those on attention weights or inside
    the feed-forward networks (`attention_dropout`, `activation_dropout`), nor word dropout. Of a `build_lstm` model:
    every Dropout layer it has (`dropout`)."""
    found = []
    for layer in model.layers:
        if layer.name in ("source_embedding_dropout", "target_embedding_dropout", "decoder_dropout") or \
                layer.name.startswith("encoder_dropout_"):
            found.append(layer)
        elif isinstance(layer, (EncoderLayer, DecoderLayer)):
            found += layer.residual_dropouts()
    return found


def set_residual_dropout(model, rate):
    """Sets `build_transformer`'s `dropout` of a built model to `rate`: the rate of `residual_dropouts(model)` and
    the encoder and decoder layers' own `dropout` (their config, which a saved `.keras` file keeps). Returns how many
    Dropout layers it set. A train step traced before keeps the old rate until it is traced again."""
    layers = residual_dropouts(model)
    for layer in layers:
        layer.rate = rate
    for layer in model.layers:
        if isinstance(layer, (EncoderLayer, DecoderLayer)):
            layer.dropout = rate
    return len(layers)
