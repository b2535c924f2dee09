"""`LSTM`: the attention encoder-decoder that the Transformer replaced, a `Seq2SeqModel` with the Transformer's inputs
and outputs."""

import keras
from keras import ops

from kmt.layers import Dropout
from kmt.layers.masks import padding_mask, source_attention_mask, source_padding_mask
from kmt.layers.recurrent import AttentionDecoder, TokenEmbedding
from kmt.models.base import Seq2SeqModel, check_joint_vocabulary, check_rates, project
from kmt.models.registry import register_model


@keras.saving.register_keras_serializable(package="kmt")
@register_model("lstm")
class LSTM(Seq2SeqModel):
    """A bidirectional-LSTM encoder and an LSTM decoder with Luong attention and input feeding (Luong et al., 2015;
    the encoder of Bahdanau et al., 2015), the recurrent baseline of "Attention Is All You Need".

    Inputs and output are `Transformer`'s: int32 `source` `(B, S)` and `target_in` `(B, T)`, pad id 0, to float32
    logits `(B, T, V_target)`. Each encoder layer is a `keras.layers.Bidirectional` LSTM of `hidden_dim / 2` units a
    direction that skips padding (`mask=`), so its states `(B, S, D)` at real positions do not depend on how much
    padding follows; the decoder is an `AttentionDecoder`. Embeddings, the encoder's outputs between layers and the
    decoder's attentional vectors are dropped out at `dropout`. Every size is `hidden_dim`, so the output projection
    can always be the target embedding transposed (`tied_output`). Its layers are attributes (`source_embedding`,
    `target_embedding`, `encoder_layers`, `decoder`, `output_projection` (untied, else None)), named as in the
    `.keras` and `.weights.h5` files kmt has always saved.

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
    >>> model = LSTM(vocab_size=100, num_layers=1, hidden_dim=16)
    >>> source = keras.ops.ones((2, 7), dtype="int32")
    >>> tuple(model({"source": source, "target_in": keras.ops.ones((2, 5), dtype="int32")}).shape)
    (2, 5, 100)
    """

    def __init__(
        self,
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
        **kwargs,
    ):
        target_vocab_size = target_vocab_size or vocab_size
        num_decoder_layers = num_decoder_layers or num_layers
        if hidden_dim % 2:
            raise ValueError(f"hidden_dim must be even (half a direction). Received: hidden_dim={hidden_dim}")
        check_joint_vocabulary(shared_embeddings, vocab_size, target_vocab_size)
        check_rates(dropout=dropout)

        # === Layers and functional model === (in the order they always were made: each Dropout takes a seed from
        # the global generator when it is made)
        source = keras.Input(shape=(None,), dtype="int32", name="source")
        target_in = keras.Input(shape=(None,), dtype="int32", name="target_in")
        source_mask = keras.layers.Lambda(source_attention_mask, name="source_attention_mask")(source)  # (B, 1, S)
        real = keras.layers.Lambda(source_padding_mask, name="source_padding_mask")(source)  # (B, S)

        self.source_embedding = TokenEmbedding(vocab_size, hidden_dim, name="source_embedding")
        self.target_embedding = (
            self.source_embedding
            if shared_embeddings
            else TokenEmbedding(target_vocab_size, hidden_dim, name="target_embedding")
        )

        self.source_embedding_dropout = Dropout(dropout, name="source_embedding_dropout")
        x = self.source_embedding_dropout(self.source_embedding(source))  # (B, S, D)
        self.encoder_layers = [
            keras.layers.Bidirectional(
                keras.layers.LSTM(hidden_dim // 2, return_sequences=True), name=f"encoder_layer_{i}"
            )
            for i in range(num_layers)
        ]
        self.encoder_dropouts = []
        for i, layer in enumerate(self.encoder_layers):
            x = layer(x, mask=real)  # (B, S, D)
            if i < num_layers - 1:
                self.encoder_dropouts.append(Dropout(dropout, name=f"encoder_dropout_{i}"))
                x = self.encoder_dropouts[-1](x)

        self.target_embedding_dropout = Dropout(dropout, name="target_embedding_dropout")
        y = self.target_embedding_dropout(self.target_embedding(target_in))  # (B, T, D)
        self.decoder = AttentionDecoder(
            hidden_dim, num_decoder_layers, score=score, max_length=max_length, name="lstm_decoder"
        )
        self.decoder_dropout = Dropout(dropout, name="decoder_dropout")
        y = self.decoder_dropout(self.decoder(y, x, source_mask))  # (B, T, D)

        self.output_projection = (
            None if tied_output else keras.layers.Dense(target_vocab_size, name="output_projection")
        )
        logits = (
            self.output_projection(y) if self.output_projection else self.target_embedding(y, reverse=True)
        )  # (B, T, V)
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
        super().__init__(inputs={"source": source, "target_in": target_in}, outputs=logits, name=name, **kwargs)

        # === Config ===
        self.vocab_size, self.target_vocab_size = vocab_size, target_vocab_size
        self.num_layers, self.num_decoder_layers = num_layers, num_decoder_layers
        self.hidden_dim, self.dropout, self.max_length = hidden_dim, dropout, max_length
        self.shared_embeddings, self.tied_output, self.score = shared_embeddings, tied_output, score

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "vocab_size": self.vocab_size,
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "dropout": self.dropout,
            "max_length": self.max_length,
            "num_decoder_layers": self.num_decoder_layers,
            "target_vocab_size": self.target_vocab_size,
            "shared_embeddings": self.shared_embeddings,
            "tied_output": self.tied_output,
            "score": self.score,
        }

    # === Decoding ===
    def encode(self, source):
        x = self.source_embedding(source)  # (B, S, D)
        real = padding_mask(source)  # (B, S)
        for layer in self.encoder_layers:
            x = layer(x, mask=real, training=False)
        return x, source_attention_mask(source)

    def decode(self, target_in, encoder_outputs, source_mask):
        states = self.decoder(self.target_embedding(target_in), encoder_outputs, source_mask)  # (N, T, D)
        return project(states, self.target_embedding, self.output_projection)

    def decoding_context(self, encoder_outputs, source_mask):
        """The attention keys, computed once `(N, S, D)`, with the encoder outputs and the source mask."""
        return self.decoder.keys(encoder_outputs), encoder_outputs, source_mask

    def initial_state(self, encoder_outputs, source_mask, max_length):
        """The decoder's state (each layer's h and c, then the attentional vector it feeds back), `[(N, D), ...]`,
        from `AttentionDecoder.initial_state`. `max_length` is unused: the state does not grow."""
        return self.decoder.initial_state(encoder_outputs)

    def decode_step(self, tokens, index, state, context):
        keys, encoder_outputs, source_mask = context
        token = ops.take(tokens, ops.reshape(index, (1,)), axis=1)[:, 0]  # (N,)
        attentional, state = self.decoder.step(
            self.target_embedding(token), state, keys, encoder_outputs, source_mask
        )  # (N, D)
        return project(attentional, self.target_embedding, self.output_projection), state  # (N, V)

    def residual_dropouts(self):
        """Every Dropout layer it has: on the embeddings, between the encoder layers and on the attentional
        vectors."""
        return [
            self.source_embedding_dropout,
            *self.encoder_dropouts,
            self.target_embedding_dropout,
            self.decoder_dropout,
        ]
