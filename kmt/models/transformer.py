"""`Transformer`: the paper's encoder-decoder assembled from kmt's layers, a `Seq2SeqModel`."""

import keras
from keras import ops

from kmt.config import ACTIVATIONS, POSITION_LAYOUTS
from kmt.layers import Bias, DecoderLayer, Dropout, EncoderLayer, GuidedAlignment, PositionalEmbedding
from kmt.layers.attention import check_divisible
from kmt.layers.masks import causal_mask, source_attention_mask, target_attention_mask
from kmt.models.base import Seq2SeqModel, check_choice, check_joint_vocabulary, check_rates, project
from kmt.models.registry import register_model


@keras.saving.register_keras_serializable(package="kmt")
@register_model("transformer")
class Transformer(Seq2SeqModel):
    """The Transformer of "Attention Is All You Need" (Vaswani et al., 2017, figure 1).

    Inputs are two int32 tensors, `source` `(B, S)` and `target_in` `(B, T)` (the target shifted right behind a
    start token), with pad id 0; the output is float32 logits `(B, T, V_target)`. Masks are built once from the ids
    and passed down. With the defaults the three embedding matrices are one (section 3.4): source embedding, target
    embedding and pre-softmax projection share a joint vocabulary. Its layers are attributes (`source_embedding`,
    `target_embedding`, `encoder_layers`, `decoder_layers`, `encoder_norm` and `decoder_norm` (pre-norm, else None),
    `output_projection` (untied, else None), `output_bias` (a `kmt.layers.Bias` with `output_bias=True`, else None)),
    named as in the `.keras` and `.weights.h5` files kmt has always saved.

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
        activation_dropout: float. Dropout after the feed-forward activation. Defaults to `0.0`.
        learned_positions: bool. Learned instead of sinusoidal positions. Defaults to `False`.
        position_layout: str. The sinusoids' layout: `"interleaved"` (the paper's, sine and cosine alternating) or
            `"halves"` (Marian's and tensor2tensor's: all sines, then all cosines). Defaults to `"interleaved"`.
        activation: str. The feed-forward inner activation of every layer: `"relu"` (the paper's), `"gelu"`, or
            `"swish"` (= `"silu"`, x * sigmoid(x), Marian's). Defaults to `"relu"`.
        output_bias: bool. A learned bias `(V_target,)`, zeros at first, added to the tied projection's logits
            (Marian's `final_logits_bias`); needs `tied_output=True` (an untied projection has its own bias).
            Defaults to `False`.
        source_word_dropout: float. Word dropout on the source (Gal & Ghahramani, 2016; Sennrich & Zhang, 2019):
            in training, each source token's whole embedded vector (token and position) is zeroed with this
            probability, the rest scaled by 1 / (1 - rate). Defaults to `0.0` (no layer is added).
        target_word_dropout: float. The same on the decoder's input (the shifted target). Defaults to `0.0`.
        layer_norm_epsilon: float. Defaults to `1e-5`.
        alignment_layer: int or None. The decoder layer whose cross-attention gives word alignments (`alignment`;
            negative counts from the last). Defaults to `None`: the last layer, the closest of a Multi30k model's
            layers to eflomal's alignments on val (docs/experiments/alignment.md); Marian's and CTranslate2's too.
        alignment_heads: int. How many of that layer's heads, from the first, are averaged: 0 averages them all; a
            model trained with guided alignment supervises head 0 and sets 1. Defaults to `0`.
        guided_alignment_weight: float. Guided alignment training (Garg et al., 2019): when positive, the graph takes
            a third input, `alignment` `(B, T, S)` (1 where target token t + 1 links source token s,
            `kmt.data.batches`), and adds this weight times the cross-entropy of head 0 of the alignment layer's
            cross-attention against it to the loss (`kmt.layers.GuidedAlignment`); `decode`, `encode` and
            `decode_step` do not change. Defaults to `0.0`: two inputs, no added loss.
        name: str. Defaults to `"transformer"`.

    Example:
    >>> model = Transformer(vocab_size=100, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32)
    >>> source = keras.ops.ones((2, 7), dtype="int32")
    >>> tuple(model({"source": source, "target_in": keras.ops.ones((2, 5), dtype="int32")}).shape)
    (2, 5, 100)
    """

    def __init__(
        self,
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
        position_layout="interleaved",
        activation="relu",
        output_bias=False,
        source_word_dropout=0.0,
        target_word_dropout=0.0,
        layer_norm_epsilon=1e-5,
        alignment_layer=None,
        alignment_heads=0,
        guided_alignment_weight=0.0,
        name="transformer",
        **kwargs,
    ):
        check_divisible(hidden_dim, num_heads)
        target_vocab_size = target_vocab_size or vocab_size
        num_decoder_layers = num_decoder_layers or num_layers
        check_joint_vocabulary(shared_embeddings, vocab_size, target_vocab_size)
        check_choice("activation", activation, ACTIVATIONS)
        check_choice("position_layout", position_layout, POSITION_LAYOUTS)
        if output_bias and not tied_output:
            raise ValueError("output_bias=True needs tied_output=True (an untied projection has its own bias)")
        check_rates(
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation_dropout=activation_dropout,
            source_word_dropout=source_word_dropout,
            target_word_dropout=target_word_dropout,
        )
        layer_args = dict(
            hidden_dim=hidden_dim,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation_dropout=activation_dropout,
            norm_first=norm_first,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
        )

        # === Layers === (made in the order they always were: each Dropout takes a seed from the global generator
        # when it is made, so this order keeps a seed's weights and masks what they were)
        def embedding(vocab, embedding_name):
            return PositionalEmbedding(
                vocab,
                hidden_dim,
                max_length=max_length,
                learned_positions=learned_positions,
                position_layout=position_layout,
                name=embedding_name,
            )

        self.source_embedding = embedding(vocab_size, "source_embedding")
        self.target_embedding = (
            self.source_embedding if shared_embeddings else embedding(target_vocab_size, "target_embedding")
        )

        # === Functional model ===
        source = keras.Input(shape=(None,), dtype="int32", name="source")
        target_in = keras.Input(shape=(None,), dtype="int32", name="target_in")
        source_mask = keras.layers.Lambda(source_attention_mask, name="source_attention_mask")(source)  # (B, 1, S)
        target_mask = keras.layers.Lambda(target_attention_mask, name="target_attention_mask")(target_in)  # (B,T,T)

        def embedded(layer, ids, side, word_dropout):
            embedding_dropout = Dropout(dropout, name=f"{side}_embedding_dropout")
            h = layer(ids)  # (B, L, D)
            if word_dropout:  # one draw a position: noise shape (B, L, 1)
                h = Dropout(word_dropout, noise_shape=(None, None, 1), name=f"{side}_word_dropout")(h)
            return embedding_dropout, embedding_dropout(h)

        self.source_embedding_dropout, x = embedded(self.source_embedding, source, "source", source_word_dropout)
        self.encoder_layers = [EncoderLayer(**layer_args, name=f"encoder_layer_{i}") for i in range(num_layers)]
        for layer in self.encoder_layers:
            x = layer(x, attention_mask=source_mask)  # (B, S, D)
        self.encoder_norm = (
            keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm") if norm_first else None
        )
        if self.encoder_norm:
            x = self.encoder_norm(x)

        self.target_embedding_dropout, y = embedded(self.target_embedding, target_in, "target", target_word_dropout)
        self.decoder_layers = [DecoderLayer(**layer_args, name=f"decoder_layer_{i}") for i in range(num_decoder_layers)]
        supervised = alignment_layer_index(alignment_layer, num_decoder_layers) if guided_alignment_weight else None
        for i, layer in enumerate(self.decoder_layers):
            if i == supervised:  # the cross-attention weights too: (B, H, T, S)
                y, attention = layer(
                    y,
                    x,
                    self_attention_mask=target_mask,
                    cross_attention_mask=source_mask,
                    return_attention_scores=True,
                )
            else:
                y = layer(y, x, self_attention_mask=target_mask, cross_attention_mask=source_mask)  # (B, T, D)
        self.decoder_norm = (
            keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="decoder_norm") if norm_first else None
        )
        if self.decoder_norm:
            y = self.decoder_norm(y)

        self.output_projection = (
            None if tied_output else keras.layers.Dense(target_vocab_size, name="output_projection")
        )
        logits = (
            self.output_projection(y) if self.output_projection else self.target_embedding(y, reverse=True)
        )  # (B, T, V)
        # The bias is added in float32 whatever the compute dtype (its layer casts the logits up first).
        self.output_bias = Bias(dtype="float32", name="output_bias") if output_bias else None
        if self.output_bias:
            logits = self.output_bias(logits)  # (B, T, V)
        inputs = {"source": source, "target_in": target_in}
        if guided_alignment_weight:
            inputs["alignment"] = keras.Input(shape=(None, None), dtype="uint8", name="alignment")  # (B, T, S)
            guide = GuidedAlignment(guided_alignment_weight, head=0, dtype="float32", name="guided_alignment")
            logits = guide(logits, attention, inputs["alignment"])  # (B, T, V), the loss added on the way
        # Logits leave in float32 whatever the compute dtype, so the softmax and the loss are computed in float32.
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
        super().__init__(inputs=inputs, outputs=logits, name=name, **kwargs)

        # === Config ===
        self.vocab_size, self.target_vocab_size = vocab_size, target_vocab_size
        self.num_layers, self.num_decoder_layers = num_layers, num_decoder_layers
        self.hidden_dim, self.num_heads, self.intermediate_dim = hidden_dim, num_heads, intermediate_dim
        self.dropout, self.attention_dropout, self.activation_dropout = dropout, attention_dropout, activation_dropout
        self.max_length = max_length
        self.shared_embeddings, self.tied_output, self.norm_first = shared_embeddings, tied_output, norm_first
        self.learned_positions, self.position_layout = learned_positions, position_layout
        self.activation = activation
        self.source_word_dropout, self.target_word_dropout = source_word_dropout, target_word_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.alignment_layer, self.alignment_heads = alignment_layer, alignment_heads
        self.guided_alignment_weight = guided_alignment_weight

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
            "norm_first": self.norm_first,
            "attention_dropout": self.attention_dropout,
            "activation_dropout": self.activation_dropout,
            "learned_positions": self.learned_positions,
            "position_layout": self.position_layout,
            "activation": self.activation,
            "output_bias": self.output_bias is not None,
            "source_word_dropout": self.source_word_dropout,
            "target_word_dropout": self.target_word_dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "alignment_layer": self.alignment_layer,
            "alignment_heads": self.alignment_heads,
            "guided_alignment_weight": self.guided_alignment_weight,
        }

    # === Decoding ===
    def encode(self, source):
        source_mask = source_attention_mask(source)  # (B, 1, S)
        x = self.source_embedding(source)  # (B, S, D)
        for layer in self.encoder_layers:
            x = layer(x, attention_mask=source_mask, training=False)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x, source_mask

    def decoder_states(self, target_in, encoder_outputs, source_mask):
        """The decoder stack (no dropout) over `target_in` `(N, T)`, teacher-forced: states `(N, T, D)` before the
        final norm (for reading its layers, e.g. their attention: `kmt.plots`)."""
        y = self.target_embedding(target_in)  # (N, T, D)
        self_mask = target_attention_mask(target_in)  # (N, T, T)
        for layer in self.decoder_layers:
            y = layer(
                y, encoder_outputs, self_attention_mask=self_mask, cross_attention_mask=source_mask, training=False
            )
        return y

    def alignment_layer_index(self):
        """The index of the decoder layer `alignment` reads (`alignment_layer`, or the last layer)."""
        return alignment_layer_index(self.alignment_layer, len(self.decoder_layers))

    def alignment(self, target_in, encoder_outputs, source_mask):
        """Teacher-forced cross-attention of the alignment layer, averaged over its `alignment_heads` first heads
        (all of them when 0): float32 `(N, T, S)`, row t the attention of the step that predicts target token t + 1
        (`target_in` holds the start token, then the target)."""
        index = self.alignment_layer_index()
        y = self.target_embedding(target_in)  # (N, T, D)
        self_mask = target_attention_mask(target_in)  # (N, T, T)
        for layer in self.decoder_layers[: index + 1]:
            y, weights = layer(
                y,
                encoder_outputs,
                self_attention_mask=self_mask,
                cross_attention_mask=source_mask,
                return_attention_scores=True,
                training=False,
            )  # weights (N, H, T, S)
        heads = self.alignment_heads or ops.shape(weights)[1]
        return ops.mean(ops.cast(weights[:, :heads], "float32"), axis=1)  # (N, T, S)

    def decode(self, target_in, encoder_outputs, source_mask):
        return self.logits(self.decoder_states(target_in, encoder_outputs, source_mask))

    def logits(self, states):
        """Final decoder norm (pre-norm models), then the output projection (and bias): (N, T, D) -> float32
        (N, T, V)."""
        if self.decoder_norm is not None:
            states = self.decoder_norm(states)
        return project(states, self.target_embedding, self.output_projection, self.output_bias)

    def decoding_context(self, encoder_outputs, source_mask):
        """Each decoder layer's cross-attention keys and values, projected once (a list of `(keys, values)`, each
        `(N, H, S, D/H)`), and the source mask."""
        return [layer.cross_attention.compute_cache(encoder_outputs) for layer in self.decoder_layers], source_mask

    def initial_state(self, encoder_outputs, source_mask, max_length):
        """Each decoder layer's self-attention cache for L+1 positions, zeros: a list of `(keys, values)`, each
        `(N, H, L+1, D/H)`."""
        rows = ops.shape(encoder_outputs)[0]
        state = []
        for layer in self.decoder_layers:
            shape = (rows, layer.num_heads, max_length + 1, layer.hidden_dim // layer.num_heads)
            state.append((ops.zeros(shape, layer.compute_dtype), ops.zeros(shape, layer.compute_dtype)))
        return state

    def decode_step(self, tokens, index, state, context):
        """Embeds the token at `index` (position `index`), writes its keys and values into each layer's cache there
        and attends to keys `<= index`."""
        cross_caches, source_mask = context
        length = ops.shape(state[0][0])[2]  # L+1
        token = ops.take(tokens, ops.reshape(index, (1,)), axis=1)  # (N, 1)
        self_mask = causal_mask(1, length, offset=index)[None, :, :]  # (1, 1, L+1): keys <= index
        y = self.target_embedding(token, start_index=index)  # (N, 1, D)
        updated = []
        for layer, cache, cross_cache in zip(self.decoder_layers, state, cross_caches):
            y, cache, _ = layer(
                y,
                self_attention_mask=self_mask,
                cross_attention_mask=source_mask,
                self_attention_cache=cache,
                self_attention_cache_update_index=index,
                cross_attention_cache=cross_cache,
                training=False,
            )
            updated.append(cache)
        return self.logits(y)[:, 0, :], updated  # (N, V)

    def residual_dropouts(self):
        """The Dropout layers whose rate is `dropout` (P_drop): on the embeddings and on every sublayer's output
        before its residual connection; not those on attention weights or inside the feed-forward networks
        (`attention_dropout`, `activation_dropout`), nor word dropout."""
        found = [self.source_embedding_dropout, self.target_embedding_dropout]
        for layer in self.encoder_layers + self.decoder_layers:
            found += layer.residual_dropouts()
        return found

    def set_residual_dropout(self, rate):
        for layer in self.encoder_layers + self.decoder_layers:
            layer.dropout = rate  # their config, which a saved `.keras` file keeps
        return super().set_residual_dropout(rate)


def alignment_layer_index(alignment_layer, count):
    """The index of the decoder layer that `alignment_layer` names among `count` (None: the last); raises
    `ValueError` when it names none."""
    layer = count - 1 if alignment_layer is None else alignment_layer
    if not -count <= layer < count:
        raise ValueError(
            f"alignment_layer must name one of the {count} decoder layers. Received: alignment_layer={layer}"
        )
    return layer % count
