"""`KmtConverter`: a `kmt.models.Transformer` as a CTranslate2 `TransformerSpec` (CTranslate2's `Converter` API).

Imported only once `ctranslate2` is known to be installed (`kmt.inference.ctranslate2.export_ctranslate2`).

What maps to what (CTranslate2's `specs/transformer_spec.py`):

- `EncoderLayer.self_attention` -> `self_attention`: `linear[0]` the fused query/key/value projection, `linear[1]`
  the output projection; `DecoderLayer.cross_attention` -> `attention`: `linear[0]` queries, `linear[1]` the fused
  key/value projection, `linear[2]` the output. A Keras kernel `(D_in, D_out)` is a CTranslate2 weight `(D_out,
  D_in)`; heads are contiguous slices of D_out in both.
- Each sublayer's LayerNorm (`*_norm`) -> its `layer_norm`: CTranslate2 applies it after the residual sum when
  `pre_norm=False` (the paper's post-norm, kmt's default) and before the sublayer when `pre_norm=True`, as kmt's
  `norm_first` does; a pre-norm model's `encoder_norm` and `decoder_norm` are the stacks' final `layer_norm`.
- Token embeddings times sqrt(D) (`scale_embeddings`), plus kmt's own position table (`position_encodings`): the
  sinusoids `kmt.layers.embedding.positional_encoding` in the model's `position_layout` for positions
  0 .. max_length - 1 (the table CTranslate2 builds itself has all sines first, then all cosines: kmt's "halves"),
  or the learned position embedding.
- The feed-forward activation -> the stacks' `activation` (relu, gelu (exact, erf), swish/silu).
- The output projection: the target embedding (tied) or `output_projection`'s kernel and bias; the tied projection's
  `output_bias` is `decoder.projection.bias`. Shared embeddings are one array, which CTranslate2 saves once.
- The vocabularies are the SentencePiece pieces in id order; unk, start (the decoder's first token) and end tokens
  are the pieces of kmt's reserved ids; `layer_norm_epsilon` is the model's.
"""

import numpy as np
from ctranslate2.converters import Converter
from ctranslate2.specs import common_spec, transformer_spec
from keras import ops

from kmt.errors import KmtError
from kmt.layers.embedding import positional_encoding
from kmt.models.transformer import Transformer
from kmt.special_ids import END_ID, START_ID, UNK_ID

ACTIVATIONS = {  # kmt's model.activation -> CTranslate2's (Keras' "gelu" is the exact one, CTranslate2's GELU)
    "relu": common_spec.Activation.RELU,
    "gelu": common_spec.Activation.GELU,
    "swish": common_spec.Activation.SWISH,
    "silu": common_spec.Activation.SWISH,
}


def _array(variable):
    return np.asarray(ops.convert_to_numpy(variable), dtype=np.float32)


class KmtConverter(Converter):
    """Converts a `kmt.models.Transformer` (float32 weights) and its `Vocabularies` to a CTranslate2 model:
    `KmtConverter(model, vocabularies).convert(output_dir, quantization="int8")`.

    Args:
        model: a `kmt.models.Transformer`.
        vocabularies: the run's `kmt.tokenizer.Vocabularies`.
    """

    def __init__(self, model, vocabularies):
        self.model = model
        self.vocabularies = vocabularies

    def _load(self):
        parts = self.model
        if not isinstance(parts, Transformer):  # CTranslate2's TransformerSpec holds a Transformer only
            raise KmtError(f"a CTranslate2 export needs a Transformer; this model is a {type(parts).__name__}")
        first = parts.encoder_layers[0]
        shape = dict(pre_norm=bool(first.norm_first), activation=ACTIVATIONS[first.activation])
        encoder = transformer_spec.TransformerEncoderSpec(len(parts.encoder_layers), first.num_heads, **shape)
        decoder = transformer_spec.TransformerDecoderSpec(
            len(parts.decoder_layers),
            first.num_heads,
            alignment_layer=parts.alignment_layer_index(),  # the attention kmt's alignments read, head for head
            alignment_heads=parts.alignment_heads or first.num_heads,
            **shape,
        )
        spec = transformer_spec.TransformerSpec(encoder, decoder)

        encoder.embeddings[0].weight = _array(parts.source_embedding.embeddings)
        encoder.position_encodings.encodings = self._positions(parts.source_embedding)
        for layer_spec, layer in zip(encoder.layer, parts.encoder_layers):
            self._attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_norm, fused=3)
            self._feed_forward(layer_spec.ffn, layer)
        decoder.embeddings.weight = _array(parts.target_embedding.embeddings)
        decoder.position_encodings.encodings = self._positions(parts.target_embedding)
        for layer_spec, layer in zip(decoder.layer, parts.decoder_layers):
            self._attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_norm, fused=3)
            self._attention(layer_spec.attention, layer.cross_attention, layer.cross_attention_norm, fused=2)
            self._feed_forward(layer_spec.ffn, layer)
        if first.norm_first:
            self._norm(encoder.layer_norm, parts.encoder_norm)
            self._norm(decoder.layer_norm, parts.decoder_norm)
        if parts.output_projection is None:  # tied: the target embedding (V, D) is the projection's weight
            decoder.projection.weight = decoder.embeddings.weight
            if parts.output_bias is not None:
                decoder.projection.bias = _array(parts.output_bias.bias)
        else:
            self._linear(decoder.projection, parts.output_projection)

        source, target = self.vocabularies.source, self.vocabularies.target
        spec.register_source_vocabulary(list(source.pieces))
        spec.register_target_vocabulary(list(target.pieces))
        vocabulary = target.pieces
        spec.config.unk_token = vocabulary[UNK_ID]
        spec.config.bos_token = spec.config.decoder_start_token = vocabulary[START_ID]
        spec.config.eos_token = vocabulary[END_ID]
        spec.config.layer_norm_epsilon = float(first.layer_norm_epsilon)
        return spec

    @staticmethod
    def _positions(embedding):
        """The `(max_length, D)` position table the embedding adds: learned, or sinusoids in its layout."""
        if embedding.learned_positions:
            return _array(embedding.position_embedding.embeddings)
        return _array(positional_encoding(embedding.max_length, embedding.hidden_dim, embedding.position_layout))

    @staticmethod
    def _linear(spec, dense):
        spec.weight = _array(dense.kernel).T  # (D_in, D_out) -> (D_out, D_in)
        if dense.use_bias:
            spec.bias = _array(dense.bias)

    @staticmethod
    def _norm(spec, norm):
        spec.gamma = _array(norm.gamma)
        spec.beta = _array(norm.beta)

    def _attention(self, spec, attention, norm, fused):
        """Self-attention (`fused=3`: query, key and value in `linear[0]`) or cross-attention (`fused=2`: queries in
        `linear[0]`, keys and values in `linear[1]`); the output projection last."""
        projections = [attention.query_dense, attention.key_dense, attention.value_dense]
        groups = [(0, 3)] if fused == 3 else [(0, 1), (1, 3)]
        for linear, (i, j) in zip(spec.linear, groups):
            linear.weight = np.concatenate([_array(d.kernel).T for d in projections[i:j]])  # (k * D, D)
            if attention.use_bias:
                linear.bias = np.concatenate([_array(d.bias) for d in projections[i:j]])
        self._linear(spec.linear[-1], attention.output_dense)
        self._norm(spec.layer_norm, norm)

    def _feed_forward(self, spec, layer):
        self._linear(spec.linear_0, layer.feed_forward.intermediate_dense)
        self._linear(spec.linear_1, layer.feed_forward.output_dense)
        self._norm(spec.layer_norm, layer.feed_forward_norm)
