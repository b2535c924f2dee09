"""The recurrent baseline's layers: a plain token embedding that doubles as the tied output projection, and an LSTM
decoder with Luong attention and input feeding (Luong, Pham & Manning, 2015, "Effective Approaches to
Attention-based Neural Machine Translation", sections 3.1 and 3.3)."""

import keras
from keras import ops

from kmt._keras_private import rnn  # the loop `keras.layers.RNN` runs, which takes a step function
from kmt.layers.masks import MASK_VALUE

SCORES = ("general", "dot")  # Luong's content-based scores (section 3.1)


@keras.saving.register_keras_serializable(package="kmt")
class TokenEmbedding(keras.layers.Layer):
    """A token embedding without positions (a recurrent model counts positions itself); called with
    `reverse=True` on states `(B, T, D)` it is the tied pre-softmax projection, logits `(B, T, V)` = states @ E^T.

    Args:
        vocab_size: int. Number of token ids V.
        hidden_dim: int. Embedding size D.

    Call arguments:
        inputs: int ids `(B, ...)`, or with `reverse=True` float states `(B, ..., D)`.
        reverse: bool. Project states onto the vocabulary instead of embedding ids. Defaults to `False`.

    Example:
    >>> tuple(TokenEmbedding(vocab_size=100, hidden_dim=16)(keras.ops.ones((2, 7), dtype="int32")).shape)
    (2, 7, 16)
    """

    def __init__(self, vocab_size, hidden_dim, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_dim = hidden_dim

    def build(self, inputs_shape=None):
        self.embeddings = self.add_weight(
            shape=(self.vocab_size, self.hidden_dim),
            initializer=keras.initializers.RandomUniform(-0.1, 0.1),
            name="embeddings",
        )
        self.built = True

    def call(self, inputs, reverse=False):
        if reverse:
            return ops.matmul(inputs, ops.transpose(ops.cast(self.embeddings, self.compute_dtype)))  # (B, T, V)
        return ops.take(ops.cast(self.embeddings, self.compute_dtype), inputs, axis=0)  # (B, T, D)

    def compute_output_spec(self, inputs, reverse=False):
        last = self.vocab_size if reverse else self.hidden_dim
        shape = tuple(inputs.shape[:-1]) + (last,) if reverse else tuple(inputs.shape) + (last,)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"vocab_size": self.vocab_size, "hidden_dim": self.hidden_dim})
        return config


@keras.saving.register_keras_serializable(package="kmt")
class AttentionDecoder(keras.layers.Layer):
    """A stack of LSTMs reading the target with Luong attention over the encoder states and input feeding.

    At step t, with y_t the embedded input token and h~_{t-1} the previous attentional vector (zeros at t = 0):
    `h_t = LSTM([y_t; h~_{t-1}])` (stacked), `a_t = softmax(score(h_t, e_s))` over the real source positions s,
    `c_t = sum_s a_t[s] e_s`, `h~_t = tanh(W_c [c_t; h_t])`; `score` is `h_t . W_a e_s` ("general") or
    `h_t . e_s` ("dot"). The states start from the encoder: every layer's `h_0 = tanh(W_b e_1)`, e_1 the
    encoder's state at the first source position (whose backward half has read the whole sentence; Bahdanau et
    al., 2015, appendix A.2.2), `c_0 = 0`.

    The recurrence is Keras's RNN loop in `call`; decoding runs `step` a token at a time, its state (each
    layer's h and c, then h~) being the cache. No dropout inside the recurrence.

    Args:
        hidden_dim: int. LSTM units D, also the attentional vector's size and the encoder states' size.
        num_layers: int. Stacked LSTMs. Defaults to `1`.
        score: str. "general" or "dot". Defaults to `"general"`.
        max_length: int or None. Longest target the model is meant for (decoding limits). Defaults to `None`.

    Call arguments:
        inputs: embedded target `(B, T, E)`.
        encoder_outputs: `(B, S, D)`.
        source_mask: bool `(B, 1, S)`, True at real source tokens.

    Returns the attentional vectors h~ `(B, T, D)`.

    Example:
    >>> decoder = AttentionDecoder(hidden_dim=8)
    >>> mask = keras.ops.ones((2, 1, 5), dtype="bool")
    >>> tuple(decoder(keras.ops.ones((2, 3, 4)), keras.ops.ones((2, 5, 8)), mask).shape)
    (2, 3, 8)
    """

    def __init__(self, hidden_dim, num_layers=1, score="general", max_length=None, **kwargs):
        super().__init__(**kwargs)
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}. Received: score={score!r}")
        self.hidden_dim = hidden_dim
        self.num_layers = num_layers
        self.score = score
        self.max_length = max_length

    def build(self, inputs_shape, encoder_outputs_shape=None, source_mask_shape=None):
        d = self.hidden_dim
        width = inputs_shape[-1] + d  # the first layer reads [y_t; h~_{t-1}]
        self.cells = []
        for i in range(self.num_layers):
            cell = keras.layers.LSTMCell(d, dtype=self.dtype_policy, name=f"lstm_{i}")
            cell.build((None, width))
            self.cells.append(cell)
            width = d
        self.bridge = keras.layers.Dense(d * self.num_layers, activation="tanh", dtype=self.dtype_policy, name="bridge")
        self.bridge.build((None, d))
        self.attention_kernel = None
        if self.score == "general":
            self.attention_kernel = keras.layers.Dense(d, use_bias=False, dtype=self.dtype_policy, name="attention")
            self.attention_kernel.build((None, None, d))
        self.combine = keras.layers.Dense(d, activation="tanh", use_bias=False, dtype=self.dtype_policy, name="combine")
        self.combine.build((None, 2 * d))
        self.built = True

    def keys(self, encoder_outputs):
        """What the scores compare h_t with: `W_a e_s` ("general") or `e_s` ("dot"), `(B, S, D)`, once a batch."""
        return self.attention_kernel(encoder_outputs) if self.attention_kernel else encoder_outputs

    def initial_state(self, encoder_outputs):
        """The state before the first step: `[h_0, c_0, ..., h_{L-1}, c_{L-1}, h~]`, each `(B, D)`."""
        b, d = ops.shape(encoder_outputs)[0], self.hidden_dim
        hidden = ops.reshape(self.bridge(encoder_outputs[:, 0, :]), (b, self.num_layers, d))  # (B, L, D)
        zeros = ops.zeros((b, d), self.compute_dtype)
        state = []
        for i in range(self.num_layers):
            state += [hidden[:, i, :], zeros]
        return state + [zeros]

    def step(self, inputs, state, keys, encoder_outputs, source_mask):
        """One step: embedded token `(B, E)` and `state` -> (h~_t `(B, D)`, the next state)."""
        x = ops.concatenate([inputs, state[-1]], axis=-1)  # (B, E + D): input feeding
        new_state = []
        for i, cell in enumerate(self.cells):
            x, (h, c) = cell(x, [state[2 * i], state[2 * i + 1]])  # (B, D)
            new_state += [h, c]
        scores = ops.einsum("bd,bsd->bs", x, keys)  # (B, S)
        scores = ops.where(source_mask[:, 0, :], scores, ops.cast(MASK_VALUE, scores.dtype))
        weights = ops.softmax(ops.cast(scores, "float32"), axis=-1)  # (B, S)
        context = ops.einsum("bs,bsd->bd", ops.cast(weights, x.dtype), encoder_outputs)  # (B, D)
        attentional = self.combine(ops.concatenate([context, x], axis=-1))  # (B, D)
        return attentional, new_state + [attentional]

    def call(self, inputs, encoder_outputs, source_mask):
        keys = self.keys(encoder_outputs)

        def step(x, state):
            return self.step(x, list(state), keys, encoder_outputs, source_mask)

        _, outputs, _ = rnn(step, inputs, self.initial_state(encoder_outputs), input_length=inputs.shape[1])
        return outputs  # (B, T, D)

    def compute_output_spec(self, inputs, encoder_outputs, source_mask):
        return keras.KerasTensor(tuple(inputs.shape[:-1]) + (self.hidden_dim,), dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "num_layers": self.num_layers,
                "score": self.score,
                "max_length": self.max_length,
            }
        )
        return config
