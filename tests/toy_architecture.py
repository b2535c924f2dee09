"""A test-only third architecture, `model.arch=toy_parallel`: the Transformer with parallel residual blocks (GPT-J,
Wang & Komatsuzaki, 2021; PaLM, Chowdhery et al., 2022). Each layer reads one LayerNorm of its input and adds every
sublayer's output to it at once, `x + Attn(LN(x)) [+ CrossAttn(LN(x), e)] + FFN(LN(x))`, where the paper's layers
chain the sublayers, each with its own residual connection and norm; each stack ends in a LayerNorm.

It is one module built from kmt's layers (attention with its cache, feed-forward, positional embedding, masks) plus one
`register_model` line: kmt's training, search, export and serving run it without knowing it is there."""

import keras
from keras import ops

from kmt.layers import Dropout, FeedForward, MultiHeadAttention, PositionalEmbedding
from kmt.layers.attention import check_divisible
from kmt.layers.masks import causal_mask, source_attention_mask, target_attention_mask
from kmt.models import Seq2SeqModel, register_model
from kmt.models.base import check_joint_vocabulary, check_rates, project


@keras.saving.register_keras_serializable(package="kmt_tests")
class ParallelBlock(keras.layers.Layer):
    """`x + Dropout(SelfAttn(LN(x))) [+ Dropout(CrossAttn(LN(x), e))] + Dropout(FFN(LN(x)))`: the sublayers read one
    norm of the input side by side and their sum is the residual update.

    Args:
        hidden_dim: int. Model size D.
        num_heads: int. Attention heads H; must divide `hidden_dim`.
        intermediate_dim: int. Feed-forward inner size.
        dropout: float. Dropout on each sublayer's output, before the sum. Defaults to `0.1`.
        cross_attention: bool. A decoder block: also attends to the encoder's outputs. Defaults to `False`.

    Call arguments:
        inputs: `(B, T, D)` float tensor.
        encoder_outputs: `(B, S, D)`, for cross-attention; None when `cross_attention_cache` is given.
        self_attention_mask: boolean, broadcastable to `(B, T, T)` (with a cache, to `(B, T, L)`).
        cross_attention_mask: boolean, broadcastable to `(B, T, S)`.
        self_attention_cache: `(keys, values)`, each `(B, H, L, D/H)`, decoded so far, or None.
        self_attention_cache_update_index: where this call's T positions go in the cache.
        cross_attention_cache: `(keys, values)`, each `(B, H, S, D/H)`, the encoder's projected once, or None.

    Returns `(B, T, D)`; with a self-attention cache, `(outputs, updated cache)`.
    """

    def __init__(self, hidden_dim, num_heads, intermediate_dim, dropout=0.1, cross_attention=False, **kwargs):
        super().__init__(**kwargs)
        check_divisible(hidden_dim, num_heads)
        self.hidden_dim, self.num_heads, self.intermediate_dim = hidden_dim, num_heads, intermediate_dim
        self.dropout, self.has_cross_attention = dropout, cross_attention

    def build(self, inputs_shape, encoder_outputs_shape=None):
        def attention(name, value_shape):
            layer = MultiHeadAttention(
                self.num_heads, self.hidden_dim // self.num_heads, dtype=self.dtype_policy, name=name
            )
            layer.build(inputs_shape, value_shape)
            return layer

        self.norm = keras.layers.LayerNormalization(epsilon=1e-5, dtype=self.dtype_policy, name="norm")
        self.norm.build(inputs_shape)
        self.self_attention = attention("self_attention", inputs_shape)
        self.cross_attention = (
            attention("cross_attention", encoder_outputs_shape or inputs_shape) if self.has_cross_attention else None
        )
        self.feed_forward = FeedForward(
            self.hidden_dim, self.intermediate_dim, dtype=self.dtype_policy, name="feed_forward"
        )
        self.feed_forward.build(inputs_shape)
        branches = ["self_attention", *(["cross_attention"] if self.has_cross_attention else []), "feed_forward"]
        self.dropouts = [Dropout(self.dropout, dtype=self.dtype_policy, name=f"{name}_dropout") for name in branches]
        self.built = True

    def call(
        self,
        inputs,
        encoder_outputs=None,
        self_attention_mask=None,
        cross_attention_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        training=None,
    ):
        h = self.norm(inputs)  # (B, T, D): what every sublayer reads
        attended = self.self_attention(
            h,
            h,
            attention_mask=self_attention_mask,
            cache=self_attention_cache,
            cache_update_index=self_attention_cache_update_index,
            training=training,
        )
        if self_attention_cache is not None:
            attended, self_attention_cache = attended
        branches = [attended]
        if self.cross_attention is not None:
            crossed = self.cross_attention(
                h, encoder_outputs, attention_mask=cross_attention_mask, cache=cross_attention_cache, training=training
            )
            branches.append(crossed[0] if cross_attention_cache is not None else crossed)
        branches.append(self.feed_forward(h, training=training))
        x = inputs
        for dropout, branch in zip(self.dropouts, branches):
            x = x + dropout(branch, training=training)
        return x if self_attention_cache is None else (x, self_attention_cache)

    def get_config(self):
        return super().get_config() | {
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "cross_attention": self.has_cross_attention,
        }


@keras.saving.register_keras_serializable(package="kmt_tests")
@register_model("toy_parallel")
class ParallelTransformer(Seq2SeqModel):
    """An encoder-decoder of `ParallelBlock`s with a final LayerNorm on each stack, over `Transformer`'s inputs and
    output: int32 `source` `(B, S)` and `target_in` `(B, T)`, pad id 0, to float32 logits `(B, T, V_target)`.

    Args:
        vocab_size: int. Source vocabulary size (the joint vocabulary when embeddings are shared).
        num_layers: int. Encoder layers (and decoder layers unless `num_decoder_layers`). Defaults to `2`.
        hidden_dim: int. Model size D. Defaults to `64`.
        num_heads: int. Attention heads. Defaults to `4`.
        intermediate_dim: int. Feed-forward inner size. Defaults to `256`.
        dropout: float. Embedding and sublayer-output dropout. Defaults to `0.1`.
        max_length: int. Longest sequence the model is meant for. Defaults to `256`.
        num_decoder_layers: int or None. Defaults to `num_layers`.
        target_vocab_size: int or None. Defaults to `vocab_size`.
        shared_embeddings: bool. One embedding for source and target. Defaults to `True`.
        tied_output: bool. The pre-softmax projection is the target embedding transposed. Defaults to `True`.
        name: str. Defaults to `"parallel_transformer"`.
    """

    def __init__(
        self,
        vocab_size,
        num_layers=2,
        hidden_dim=64,
        num_heads=4,
        intermediate_dim=256,
        dropout=0.1,
        max_length=256,
        *,
        num_decoder_layers=None,
        target_vocab_size=None,
        shared_embeddings=True,
        tied_output=True,
        name="parallel_transformer",
        **kwargs,
    ):
        target_vocab_size = target_vocab_size or vocab_size
        num_decoder_layers = num_decoder_layers or num_layers
        check_joint_vocabulary(shared_embeddings, vocab_size, target_vocab_size)
        check_rates(dropout=dropout)
        block = dict(hidden_dim=hidden_dim, num_heads=num_heads, intermediate_dim=intermediate_dim, dropout=dropout)

        # === Layers and functional model ===
        source = keras.Input(shape=(None,), dtype="int32", name="source")
        target_in = keras.Input(shape=(None,), dtype="int32", name="target_in")
        source_mask = keras.layers.Lambda(source_attention_mask, name="source_attention_mask")(source)  # (B, 1, S)
        target_mask = keras.layers.Lambda(target_attention_mask, name="target_attention_mask")(target_in)  # (B,T,T)

        self.source_embedding = PositionalEmbedding(vocab_size, hidden_dim, max_length, name="source_embedding")
        self.target_embedding = (
            self.source_embedding
            if shared_embeddings
            else PositionalEmbedding(target_vocab_size, hidden_dim, max_length, name="target_embedding")
        )
        self.source_embedding_dropout = Dropout(dropout, name="source_embedding_dropout")
        x = self.source_embedding_dropout(self.source_embedding(source))  # (B, S, D)
        self.encoder_layers = [ParallelBlock(**block, name=f"encoder_layer_{i}") for i in range(num_layers)]
        for layer in self.encoder_layers:
            x = layer(x, self_attention_mask=source_mask)
        self.encoder_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="encoder_norm")
        x = self.encoder_norm(x)

        self.target_embedding_dropout = Dropout(dropout, name="target_embedding_dropout")
        y = self.target_embedding_dropout(self.target_embedding(target_in))  # (B, T, D)
        self.decoder_layers = [
            ParallelBlock(**block, cross_attention=True, name=f"decoder_layer_{i}") for i in range(num_decoder_layers)
        ]
        for layer in self.decoder_layers:
            y = layer(y, x, self_attention_mask=target_mask, cross_attention_mask=source_mask)
        self.decoder_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="decoder_norm")
        self.output_projection = (
            None if tied_output else keras.layers.Dense(target_vocab_size, name="output_projection")
        )
        y = self.decoder_norm(y)
        logits = self.output_projection(y) if self.output_projection else self.target_embedding(y, reverse=True)
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)  # (B, T, V) float32
        super().__init__(inputs={"source": source, "target_in": target_in}, outputs=logits, name=name, **kwargs)

        # === Config ===
        self.vocab_size, self.target_vocab_size = vocab_size, target_vocab_size
        self.num_layers, self.num_decoder_layers = num_layers, num_decoder_layers
        self.hidden_dim, self.num_heads, self.intermediate_dim = hidden_dim, num_heads, intermediate_dim
        self.dropout, self.max_length = dropout, max_length
        self.shared_embeddings, self.tied_output = shared_embeddings, tied_output

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "vocab_size": self.vocab_size,
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "max_length": self.max_length,
            "num_decoder_layers": self.num_decoder_layers,
            "target_vocab_size": self.target_vocab_size,
            "shared_embeddings": self.shared_embeddings,
            "tied_output": self.tied_output,
        }

    # === Decoding ===
    def encode(self, source):
        source_mask = source_attention_mask(source)  # (B, 1, S)
        x = self.source_embedding(source)
        for layer in self.encoder_layers:
            x = layer(x, self_attention_mask=source_mask, training=False)
        return self.encoder_norm(x), source_mask

    def decode(self, target_in, encoder_outputs, source_mask):
        y = self.target_embedding(target_in)  # (N, T, D)
        self_mask = target_attention_mask(target_in)  # (N, T, T)
        for layer in self.decoder_layers:
            y = layer(
                y, encoder_outputs, self_attention_mask=self_mask, cross_attention_mask=source_mask, training=False
            )
        return project(self.decoder_norm(y), self.target_embedding, self.output_projection)

    def decoding_context(self, encoder_outputs, source_mask):
        """Each decoder block's cross-attention keys and values, projected once, and the source mask."""
        return [layer.cross_attention.compute_cache(encoder_outputs) for layer in self.decoder_layers], source_mask

    def initial_state(self, encoder_outputs, source_mask, max_length):
        """Each decoder block's self-attention cache for L+1 positions, zeros: a list of `(keys, values)`, each
        `(N, H, L+1, D/H)`."""
        rows, heads = ops.shape(encoder_outputs)[0], self.num_heads
        shape = (rows, heads, max_length + 1, self.hidden_dim // heads)
        return [(ops.zeros(shape, layer.compute_dtype),) * 2 for layer in self.decoder_layers]

    def decode_step(self, tokens, index, state, context):
        cross_caches, source_mask = context
        length = ops.shape(state[0][0])[2]  # L+1
        token = ops.take(tokens, ops.reshape(index, (1,)), axis=1)  # (N, 1)
        self_mask = causal_mask(1, length, offset=index)[None, :, :]  # (1, 1, L+1): keys <= index
        y = self.target_embedding(token, start_index=index)  # (N, 1, D)
        updated = []
        for layer, cache, cross_cache in zip(self.decoder_layers, state, cross_caches):
            y, cache = layer(
                y,
                self_attention_mask=self_mask,
                cross_attention_mask=source_mask,
                self_attention_cache=cache,
                self_attention_cache_update_index=index,
                cross_attention_cache=cross_cache,
                training=False,
            )
            updated.append(cache)
        return project(self.decoder_norm(y), self.target_embedding, self.output_projection)[:, 0, :], updated

    def residual_dropouts(self):
        """The embeddings' Dropout layers and each block's, on its sublayers' outputs."""
        found = [self.source_embedding_dropout, self.target_embedding_dropout]
        for layer in self.encoder_layers + self.decoder_layers:
            found += layer.dropouts
        return found

    def set_residual_dropout(self, rate):
        for layer in self.encoder_layers + self.decoder_layers:
            layer.dropout = rate  # their config, which a saved `.keras` file keeps
        return super().set_residual_dropout(rate)
