"""`Seq2SeqModel`: the base of kmt's encoder-decoder models, a functional `keras.Model` subclass (keras-hub's
backbone shape: `__init__` makes the layers as attributes, wires the graph and calls
`super().__init__(inputs=..., outputs=...)`; `get_config()` returns the `__init__` arguments) whose decoding face is
methods, so search, scoring and export run any registered architecture without asking which it is."""

import inspect

import keras
from keras import ops

# A trained model.keras names kmt's loss, metric and schedule too: registered with any model class.
import kmt.losses  # noqa: F401
import kmt.schedule  # noqa: F401


class Seq2SeqModel(keras.Model):
    """An encoder-decoder over token ids: inputs int32 `source` `(B, S)` and `target_in` `(B, T)` (the target shifted
    right behind a start token), pad id 0; output float32 logits `(B, T, V_target)`.

    A subclass builds its graph in `__init__` and implements the decoding face below; `kmt.inference.steps` turns
    it into the step functions the searches drive. `max_length` (an int attribute) is the longest sequence the
    model is meant for. `from_model_config` builds one from the config's `model` group
    (`kmt.models.register_model` names it there as `model.arch`).
    """

    max_length: int

    def __setattr__(self, name, value):
        # Under PyTorch a Keras layer is a torch.nn.Module, which refuses sublayers set before its __init__; a
        # subclass sets its layers before calling keras.Model's (the functional graph tracks them all the same), so
        # until then they are plain attributes (keras-hub's Backbone does the same).
        if keras.config.backend() == "torch" and not hasattr(self, "_initialized"):
            return object.__setattr__(self, name, value)
        return super().__setattr__(name, value)

    @classmethod
    def from_model_config(cls, model_cfg, source_vocab_size: int, target_vocab_size: int, **training) -> "Seq2SeqModel":
        """The model of `model_cfg` (the config's `model` group) for vocabularies of these sizes: each `__init__`
        argument the group names (`num_layers`, `hidden_dim`, ...) takes the group's value, the rest its default.
        `training` holds `__init__` arguments another group decides (`guided_alignment_weight`, from `optim`)."""
        arguments = inspect.signature(cls.__init__).parameters
        given = {name: model_cfg[name] for name in arguments if name not in ("self", "name") and name in model_cfg}
        return cls(vocab_size=source_vocab_size, target_vocab_size=target_vocab_size, **given, **training)

    def encode(self, source):
        """The encoder (no dropout): int `source` `(B, S)` -> (`encoder_outputs` `(B, S, D)`, `source_mask`
        `(B, 1, S)` bool, True where a query may attend)."""
        raise NotImplementedError

    def decode(self, target_in, encoder_outputs, source_mask):
        """The decoder (no dropout) over all of `target_in` `(N, T)`, teacher-forced: float32 logits `(N, T, V)`.
        What follows a position cannot reach it (the uncached step reads position `index` of a padded buffer)."""
        raise NotImplementedError

    def decoding_context(self, encoder_outputs, source_mask):
        """What every step of a cached search reads and never changes, computed once from `encode`'s outputs
        (expanded to beams when searching with beams): a nest of tensors. Beams are only ever reordered within a
        sentence, whose rows share it, so the searches close over it rather than reorder it."""
        raise NotImplementedError

    def initial_state(self, encoder_outputs, source_mask, max_length):
        """The state a cached search starts from: a nest of tensors with the beams' rows `N` first, reordered with
        them. `max_length` is L, int or scalar int tensor: the token buffer has L+1 columns."""
        raise NotImplementedError

    def decode_step(self, tokens, index, state, context):
        """One cached step: the token at `index` of `tokens` `(N, L+1)` is fed, given `state` (`initial_state` or
        the previous step's) and `context` (`decoding_context`): `(logits (N, V) float32, new state)`."""
        raise NotImplementedError

    def residual_dropouts(self) -> list:
        """The Dropout layers whose rate is the model's `dropout` (late dropout sets them,
        `kmt.training.control.LateDropout`)."""
        raise NotImplementedError

    def set_residual_dropout(self, rate: float) -> int:
        """Sets the model's `dropout` of a built model to `rate`: the rate of `residual_dropouts()` (and what a saved
        config keeps). Returns how many Dropout layers it set. A train step traced before keeps the old rate until
        it is traced again."""
        layers = self.residual_dropouts()
        for layer in layers:
            layer.rate = rate
        self.dropout = rate
        return len(layers)


def project(states, target_embedding, output_projection, output_bias=None):
    """The pre-softmax projection: `output_projection` (a `Dense`) or, when None, the target embedding transposed,
    plus `output_bias` (a `kmt.layers.Bias`) when given: `(..., D)` -> float32 `(..., V)`."""
    projected = output_projection(states) if output_projection else target_embedding(states, reverse=True)
    if output_bias is not None:
        projected = output_bias(projected)
    return ops.cast(projected, "float32")


def check_rates(**rates):
    """Raises `ValueError` unless every rate is in [0, 1)."""
    for rate_name, rate in rates.items():
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"{rate_name} must be in [0, 1). Received: {rate_name}={rate}")


def check_choice(name, value, choices):
    """Raises `ValueError` unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}. Received: {name}={value!r}")


def check_joint_vocabulary(shared_embeddings, vocab_size, target_vocab_size):
    """Raises `ValueError` when shared embeddings are asked for two vocabulary sizes."""
    if shared_embeddings and target_vocab_size != vocab_size:
        raise ValueError(
            "shared_embeddings=True needs one joint vocabulary. "
            f"Received: vocab_size={vocab_size}, target_vocab_size={target_vocab_size}"
        )
