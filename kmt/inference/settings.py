"""`SearchSettings`: how a model searches for translations, as one frozen value.

Built once, from a run's `decode` section (`SearchSettings.from_config`) or from command-line flags
(`settings.replace(beam_size=args.beam_size)`), and passed whole to `kmt.inference.decoding.search_ids`, the
SavedModel export and every translator.

Example:
>>> settings = SearchSettings(beam_size=5)
>>> settings.replace(beam_size=None, length_penalty=1.0)  # None: a flag not given, the value stays
SearchSettings(beam_size=5, length_penalty=1.0, max_length_a=1.5, max_length_b=10, max_length=None, nbest=None, \
sampling_topk=1, sampling_temperature=1.0, sampling_topp=1.0)
>>> settings.replace(sampling_topk=0).beam_size  # sampling draws one translation: the beam goes
1
"""

import dataclasses

from kmt.errors import KmtError


class SettingsError(KmtError, ValueError):
    """A search setting out of range: a `ValueError`, and a user's mistake (one line at the command line)."""


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """Greedy, beam or sampling search with its length limits; checked when made (`SettingsError`, a `ValueError`,
    naming the value).

    Sentence i of a batch emits at most `min(max_length, ceil(max_length_a * S_i + max_length_b))` tokens, S_i being
    its count of source tokens.

    Args:
        beam_size: int K; 1 is greedy search. Defaults to `4`.
        length_penalty: float alpha of GNMT's penalty: a hypothesis scores `log p(Y) / ((5 + |Y|) / 6) ** alpha`
            (beam search only). Defaults to `0.6`.
        max_length_a: float, the output limit's slope in S_i. Defaults to `1.5`.
        max_length_b: float, the output limit's intercept. Defaults to `10`.
        max_length: int cap on the output length. Defaults to `None`: the model's `max_length`.
        nbest: int n, 1 to K: the n best hypotheses of each sentence (greedy search and sampling have one).
            Defaults to `None`: the best one, without the hypothesis axis.
        sampling_topk: int. With `beam_size` 1: 0 draws each token from the whole distribution, k > 1 from the k
            most probable tokens (OpenNMT-tf's `sampling_topk`); 1 is greedy search. Defaults to `1`.
        sampling_temperature: float > 0 dividing the logits tokens are drawn from. Defaults to `1.0`.
        sampling_topp: float in (0, 1]: draw from the fewest most probable tokens holding this much probability
            (nucleus sampling; fairseq's `--sampling-topp`); 1 is off. Defaults to `1.0`.
    """

    beam_size: int = 4
    length_penalty: float = 0.6
    max_length_a: float = 1.5
    max_length_b: int = 10
    max_length: int | None = None
    nbest: int | None = None
    sampling_topk: int = 1
    sampling_temperature: float = 1.0
    sampling_topp: float = 1.0

    def __post_init__(self):
        beam_size, topk, topp, nbest = self.beam_size, self.sampling_topk, self.sampling_topp, self.nbest
        _check(beam_size >= 1, f"beam_size must be >= 1. Received: beam_size={beam_size}")
        _check(
            self.max_length is None or self.max_length >= 1,
            f"max_length must be >= 1. Received: max_length={self.max_length}",
        )
        _check(
            nbest is None or 1 <= nbest <= beam_size,
            f"nbest must be 1 to beam_size. Received: nbest={nbest}, beam_size={beam_size}",
        )
        _check(topk >= 0, f"sampling_topk must be >= 0. Received: sampling_topk={topk}")
        _check(
            topk == 1 or beam_size == 1,
            f"sampling_topk samples with beam_size=1 only. Received: sampling_topk={topk}, beam_size={beam_size}",
        )
        _check(
            self.sampling_temperature > 0,
            f"sampling_temperature must be positive. Received: sampling_temperature={self.sampling_temperature}",
        )
        _check(0 < topp <= 1, f"sampling_topp must be in (0, 1]. Received: sampling_topp={topp}")
        _check(
            topp == 1 or topk != 1,
            "sampling_topp applies to sampling: set sampling_topk=0 (or K > 1) too. "
            f"Received: sampling_topp={topp}, sampling_topk={topk}",
        )

    @classmethod
    def from_config(cls, decode) -> "SearchSettings":
        """The settings of a run's `decode` section (a `kmt.config.DecodeConfig`, its `DictConfig`, or a mapping)."""
        get = decode.get if hasattr(decode, "get") else lambda name, default: getattr(decode, name, default)
        names = [field.name for field in dataclasses.fields(cls)]
        return cls(**{name: get(name, None) for name in names if get(name, None) is not None})

    @property
    def sampling(self) -> bool:
        """Whether tokens are drawn at random (`sampling_topk` other than 1) rather than searched for."""
        return self.sampling_topk != 1

    def replace(self, **changes) -> "SearchSettings":
        """A copy with `changes`; a change of None (a flag not given) leaves its value. Changing the beam size alone
        turns sampling off, and asking for sampling alone sets the beam size to 1 (sampling draws one
        translation), so a run's sampling settings never clash with a beam asked for, nor its beam with sampling."""
        changes = {name: value for name, value in changes.items() if value is not None}
        if "beam_size" in changes and "sampling_topk" not in changes:
            changes["sampling_topk"] = 1
            if self.sampling_topp != 1 and "sampling_topp" not in changes:
                changes["sampling_topp"] = 1.0
        if changes.get("sampling_topk", 1) != 1 and "beam_size" not in changes:
            changes["beam_size"] = 1
        return dataclasses.replace(self, **changes)

    def greedy(self) -> "SearchSettings":
        """Greedy search with these length limits (what scores val during training)."""
        nbest = None if self.nbest is None else 1
        return dataclasses.replace(self, beam_size=1, nbest=nbest, sampling_topk=1, sampling_topp=1.0)


def _check(condition, message):
    if not condition:
        raise SettingsError(message)
