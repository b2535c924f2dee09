"""`build_transformer`: the paper's encoder-decoder assembled from kmt's layers as a functional `keras.Model`."""

import keras

from kmt.layers import DecoderLayer, Dropout, EncoderLayer, PositionalEmbedding
from kmt.layers.feedforward import check_divisible
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

    Layer names are a contract used by `kmt.decoding`: `source_embedding`, `target_embedding` (the same layer
    when shared), `encoder_layer_{i}`, `decoder_layer_{i}`, `encoder_norm` and `decoder_norm` (pre-norm only),
    `output_projection` (untied output only).

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
    >>> model({"source": source, "target_in": keras.ops.ones((2, 5), dtype="int32")}).shape
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
    for i in range(num_layers):
        x = EncoderLayer(**layer_args, name=f"encoder_layer_{i}")(x, attention_mask=source_mask)
    if norm_first:
        x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm")(x)

    y = embedded(target_embedding, target_in, "target", target_word_dropout)  # (B, T, D)
    for i in range(num_decoder_layers):
        y = DecoderLayer(**layer_args, name=f"decoder_layer_{i}")(
            y, x, self_attention_mask=target_mask, cross_attention_mask=source_mask
        )
    if norm_first:
        y = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="decoder_norm")(y)

    if tied_output:
        logits = target_embedding(y, reverse=True)  # (B, T, V)
    else:
        logits = keras.layers.Dense(target_vocab_size, name="output_projection")(y)  # (B, T, V)
    # Logits leave in float32 whatever the compute dtype, so the softmax and the loss are computed in float32.
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
    return keras.Model(inputs={"source": source, "target_in": target_in}, outputs=logits, name=name)


def residual_dropouts(model):
    """The Dropout layers (`kmt.layers.Dropout`) whose rate is `build_transformer`'s `dropout` (P_drop): on the
    embeddings and on every sublayer's output before its residual connection; not those on attention weights or inside
    the feed-forward networks (`attention_dropout`, `activation_dropout`), nor word dropout."""
    found = []
    for layer in model.layers:
        if layer.name in ("source_embedding_dropout", "target_embedding_dropout"):
            found.append(layer)
        elif isinstance(layer, EncoderLayer):  # and DecoderLayer, its subclass
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
        if isinstance(layer, EncoderLayer):
            layer.dropout = rate
    return len(layers)
