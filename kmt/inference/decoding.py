"""A model's search over token ids: the encoder once per batch, then the settings' strategy (`Greedy`, `Beam`,
`Sampling`: `kmt.inference.strategies`) driven by a key/value cache (`kmt.inference.steps`). A list of models sharing a
vocabulary searches as one ensemble (`kmt.inference.ensemble`).

Example:
>>> from kmt.models import Transformer
>>> model = Transformer(vocab_size=20, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32)
>>> tokens, scores = search_ids(model, keras.ops.ones((2, 5), dtype="int32"), SearchSettings.of(beam_size=3))
>>> tuple(tokens.shape)  # (B, min(256, ceil(1.5 * 5 + 10)))
(2, 18)
"""

import keras
from keras import ops

from kmt.inference.ensemble import ensemble_members, ensemble_next_fn
from kmt.inference.lengths import decode_length, decode_lengths, max_length_of
from kmt.inference.search import expand_to_beams
from kmt.inference.settings import Greedy, SearchSettings
from kmt.inference.steps import cached_next_fn, uncached_next_fn
from kmt.special_ids import END_ID, PAD_ID, START_ID

GREEDY = SearchSettings(Greedy())  # search_ids' default


def search_ids(
    model,
    source,
    settings: SearchSettings | None = None,
    *,
    use_cache=True,
    start_id=START_ID,
    end_id=END_ID,
    pad_id=PAD_ID,
    random_uniform=None,
    prefix=None,
    constraints=None,
    hypotheses=False,
):
    """Translates a batch of token ids: encode once, then the settings' strategy searches.

    Beams share the encoder output (it is expanded to beams after encoding). Sentence i emits at most
    `min(max_length, ceil(max_length_a * S_i + max_length_b))` tokens, S_i being its count of non-pad source tokens
    (`decode_lengths`), so its translation is the same alone as in any batch. The output has L columns, L being the
    limit of the padded length S: the longest sentence's limit (for `max_length_a >= 0`) in a batch padded to its
    longest sentence, and a static width whenever S is static. The search stops once every sentence has ended or
    reached its own limit.

    Args:
        model: a `kmt.models.Seq2SeqModel`, or a list of them sharing one vocabulary: an ensemble, whose search
            scores each next token by the mean of the models' probabilities (`ensemble_next_fn`).
        source: int `(B, S)` source ids, pad 0.
        settings: the `SearchSettings`: the strategy (`Greedy`, `Beam`, `Sampling`) and the length limits
            (`max_length` defaults to the model's, an ensemble's shortest). Defaults to `GREEDY`: greedy search with
            the default length limits.
        use_cache: bool. Key/value cache (True) or rerunning the decoder on the prefix (False). Defaults to `True`.
        start_id: int, the token decoding starts from. Defaults to `kmt.special_ids.START_ID`.
        end_id: int, the token that ends a translation. Defaults to `kmt.special_ids.END_ID`.
        pad_id: int, the token after the end. Defaults to `kmt.special_ids.PAD_ID`.
        random_uniform: `shape -> float32 uniform [0, 1)` tensor, the randomness of sampling. Defaults to
            `keras.random.uniform` (Keras's global seed generator).
        prefix: int `(B, P)` target ids each translation begins with, pad after each row's; a row must fit its
            sentence's limit (the caller checks). Defaults to `None`.
        constraints: int `(B, C, W)` target phrases each translation must contain, pad after each phrase's ids
            (lexically constrained search, `kmt.inference.constrained`; greedy and beam search only). Defaults to
            `None`.
        hypotheses: bool. Keep the hypothesis axis whatever the strategy (one hypothesis for greedy search and
            sampling). Defaults to `False`: kept only for a beam's `nbest`.

    Returns `(tokens, scores)`: int32 `(B, L)` emitted tokens WITHOUT the start token, the end token then pad
    after it (a sentence stopped by its limit has no end token, only pad after it), and float32 `(B,)` scores
    (greedy: the sum of log-probabilities; beam: that sum divided by the length penalty); with the hypothesis axis,
    `(B, n, L)` and `(B, n)`, best first.
    """
    s = settings or GREEDY
    strategy = s.strategy
    models = ensemble_members(model)
    max_length = max_length_of(models, s.max_length)
    if not max_length:
        raise ValueError(f"search_ids needs max_length or a model with one. Received: max_length={max_length}")
    source = ops.convert_to_tensor(source, "int32")
    batch_size, source_length = ops.shape(source)[0], ops.shape(source)[1]
    limit = decode_length(source_length, max_length, s.max_length_a, s.max_length_b)  # L, the buffer's width
    limits = decode_lengths(source, max_length, s.max_length_a, s.max_length_b)  # (B,) each sentence's own
    make_next_fn = cached_next_fn if use_cache else uncached_next_fn
    next_fns, states = [], []
    for member in models:
        encoder_outputs, source_mask = member.encode(source)
        if strategy.beams > 1:
            encoder_outputs, source_mask = expand_to_beams((encoder_outputs, source_mask), strategy.beams)
        member_fn, member_state = make_next_fn(member, encoder_outputs, source_mask, limit)
        next_fns.append(member_fn)
        states.append(member_state)
    next_fn, state = ensemble_next_fn(next_fns), (states if len(models) > 1 else states[0])
    tokens, scores = strategy.search(  # (B, n, L+1), (B, n)
        next_fn,
        state,
        batch_size,
        limit,
        max_lengths=limits,
        prefix=prefix,
        constraints=constraints,
        random_uniform=random_uniform or keras.random.uniform,
        ids=dict(start_id=start_id, end_id=end_id, pad_id=pad_id),
    )
    if not hypotheses and strategy.nbest is None:
        tokens, scores = tokens[:, 0], scores[:, 0]
    return tokens[..., 1:], scores
