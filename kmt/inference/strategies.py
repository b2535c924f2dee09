"""Search strategies, one object each (keras-hub's Samplers, OpenNMT-tf's `DecodingStrategy`): how the next tokens of a
translation are chosen. `Greedy` takes the most probable token, `Beam` keeps the K best hypotheses, `Sampling` draws
tokens at random. Each runs its search (`search`: ids to ids, backend-neutral `keras.ops`, inside the SavedModel too)
and says what it supports (`supports`: the formats that decode with it, target prefixes, alignments).

Every option is declared once, here (and the length limits in `kmt.inference.settings`), as a dataclass field made
by `option`: its flat name is the config key `decode.<name>`, the command-line flag `--<name>` and the keyword of
`SearchSettings.of` and `SearchSettings.replace`; `OPTIONS` lists them all, and the config group
(`kmt.config.DecodeConfig`) and the flags (`kmt.cli.common.add_search_flags`) are made from that list.

Example:
>>> Beam(size=5).supports("ctranslate2"), Sampling(top_k=10).supports("ctranslate2")
(True, False)
>>> Beam(size=5).options()["beam_size"], Sampling(top_k=10).options()["beam_size"]
(5, 1)
"""

import dataclasses
from typing import Any, ClassVar

from kmt.errors import KmtError

FORMATS = {"run": "a run directory", "savedmodel": "a SavedModel", "ctranslate2": "a CTranslate2 directory"}
FEATURES = ("prefixes", "alignments")  # what every strategy does, in every format that decodes with it
CONSTRAINED = ("run", "savedmodel")  # the formats that decode with constraints (CTranslate2 cannot)


class SettingsError(KmtError, ValueError):
    """A search setting out of range: a `ValueError`, and a user's mistake (one line at the command line)."""


def check(condition, message):
    """Raises `SettingsError(message)` unless `condition`."""
    if not condition:
        raise SettingsError(message)


def option(default, why, name, *, off=None, config=True):
    """A dataclass field that is a search option: `name` is its flat name (config key, flag, keyword), `why` one line
    for the config reference and `--help`, `off` the flat value that means its strategy is not the one searching
    (defaults to `default`), `config` whether runs set it in their `decode` section."""
    off = default if off is None else off
    return dataclasses.field(default=default, metadata={"name": name, "why": why, "off": off, "config": config})


@dataclasses.dataclass(frozen=True)
class Option:
    """One flat option: its `name`, Python `type`, `off` value (what it reads while its strategy is not the one
    searching), `why`, and whether a run's `decode` section holds it (`config`)."""

    name: str
    type: Any
    off: Any
    why: str
    config: bool


def options_of(cls) -> list[Option]:
    """The `Option`s a dataclass declares with `option`, in field order."""
    return [
        Option(f.metadata["name"], f.type, f.metadata["off"], f.metadata["why"], f.metadata["config"])
        for f in dataclasses.fields(cls)
        if "name" in f.metadata
    ]


@dataclasses.dataclass(frozen=True)
class Strategy:
    """What every strategy has: a `search` over a `next_fn` (see `kmt.inference.search`) and `supports`."""

    formats: ClassVar[tuple[str, ...]] = tuple(FORMATS)  # those that decode with this strategy

    @property
    def beams(self) -> int:
        """Rows of decoder state per sentence: the search's state and encoder outputs are repeated this often."""
        return 1

    @property
    def nbest(self) -> int | None:
        """Hypotheses returned per sentence, None for the best one without the hypothesis axis."""
        return None

    def supports(self, feature: str) -> bool:
        """Whether this strategy decodes in format `feature` (`run`, `savedmodel`, `ctranslate2`) or does `feature`
        (`prefixes`, `alignments`, `constraints`)."""
        return feature in FEATURES or feature in self.formats or (feature == "constraints" and self.constrains)

    constrains: ClassVar[bool] = False  # whether its search takes constraints (in the `CONSTRAINED` formats)

    def require(self, feature: str):
        """Raises a `SettingsError` naming the formats that can, unless `supports(feature)`."""
        if self.supports(feature):
            return
        if feature not in FORMATS:  # a feature: name the strategies that have it
            able = " or ".join(cls.__name__ for cls in STRATEGIES if cls.constrains or feature != "constraints")
            raise SettingsError(f"{self} cannot take {feature}; {able} can (set beam_size, sampling_topk=1)")
        able = " or ".join(FORMATS[name] for name in FORMATS if self.supports(name))
        raise SettingsError(f"{FORMATS[feature]} cannot decode with {self}; {able} can")

    def options(self) -> dict[str, Any]:
        """Every flat option's value: this strategy's own, the others' `off` values."""
        values = {o.name: o.off for cls in STRATEGIES for o in options_of(cls)}
        values.update({f.metadata["name"]: getattr(self, f.name) for f in dataclasses.fields(self)})
        return values

    def search(
        self, next_fn, state, batch_size, max_length, *, max_lengths, prefix, random_uniform, ids, constraints=None
    ):
        """Searches: `(tokens, scores)`, int32 `(B, n, L+1)` with the start token in column 0 and float32 `(B, n)`,
        n being `nbest` or 1.

        Args:
            next_fn: `(tokens (B*beams, L+1), index, state) -> (logits (B*beams, V), state)`.
            state: nest of tensors with `beams` rows per sentence, the rows of a sentence adjacent.
            batch_size: int or scalar tensor B.
            max_length: int or scalar int tensor L, the loop bound.
            max_lengths: int `(B,)` each sentence's own limit.
            prefix: int `(B, P)` target ids each translation must begin with (pad after each), or None.
            random_uniform: `shape -> float32 uniform [0, 1)` tensor, for strategies that draw.
            ids: {"start_id", "end_id", "pad_id"}.
            constraints: int `(B, C, W)` target phrases each translation must contain (pad after each phrase's
                ids; `kmt.inference.constrained`), or None; only where `supports("constraints")`.
        """
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Greedy(Strategy):
    """The most probable token at each step (beam search with one beam; with constraints, the constrained beam
    search of one beam, which takes each constraint's tokens as soon as the model lets it)."""

    constrains: ClassVar[bool] = True

    def search(
        self, next_fn, state, batch_size, max_length, *, max_lengths, prefix, random_uniform, ids, constraints=None
    ):
        from kmt.inference.search import greedy_search

        if constraints is not None:
            return Beam(size=1, length_penalty=0.0, nbest=1).search(
                next_fn,
                state,
                batch_size,
                max_length,
                max_lengths=max_lengths,
                prefix=prefix,
                random_uniform=random_uniform,
                ids=ids,
                constraints=constraints,
            )
        tokens, scores = greedy_search(
            next_fn, state, batch_size, max_length, max_lengths=max_lengths, prefix=prefix, **ids
        )
        return tokens[:, None], scores[:, None]


@dataclasses.dataclass(frozen=True)
class Beam(Strategy):
    """Beam search with GNMT's length penalty (Wu et al., 2016): `kmt.inference.search.beam_search`.

    Args:
        size: K, the hypotheses kept at each step. Defaults to `4`.
        length_penalty: alpha: a hypothesis scores `log p(Y) / ((5 + |Y|) / 6) ** alpha`. Defaults to `0.6`.
        nbest: n, 1 to K: the n best hypotheses of each sentence. Defaults to `None`: the best one, without the
            hypothesis axis.
    """

    size: int = option(4, "beam size K; 1 is greedy search", "beam_size", off=1)
    length_penalty: float = option(0.6, "GNMT alpha: score / ((5 + |Y|) / 6) ** alpha", "length_penalty")
    nbest: int | None = option(None, "hypotheses returned per sentence, 1 to beam_size", "nbest", config=False)

    def __post_init__(self):
        check(self.size >= 1, f"beam_size must be >= 1. Received: beam_size={self.size}")
        check(
            self.nbest is None or 1 <= self.nbest <= self.size,
            f"nbest must be 1 to beam_size. Received: nbest={self.nbest}, beam_size={self.size}",
        )

    constrains: ClassVar[bool] = True

    @property
    def beams(self):
        return self.size

    @property
    def formats(self):
        # CTranslate2 directories return one hypothesis a sentence.
        return tuple(FORMATS) if self.nbest in (None, 1) else ("run", "savedmodel")

    def search(
        self, next_fn, state, batch_size, max_length, *, max_lengths, prefix, random_uniform, ids, constraints=None
    ):
        from kmt.inference.search import beam_search

        if constraints is not None:  # Post & Vilar's dynamic beam allocation (kmt.inference.constrained)
            from kmt.inference.constrained import constrained_beam_search

            tokens, scores, _ = constrained_beam_search(
                next_fn,
                state,
                batch_size,
                max_length,
                constraints,
                self.size,
                self.length_penalty,
                max_lengths=max_lengths,
                num_hypotheses=self.nbest or 1,
                prefix=prefix,
                **ids,
            )
            return tokens, scores
        if self.size == 1:  # one beam is greedy search, with its scores (no length penalty)
            return Greedy().search(
                next_fn,
                state,
                batch_size,
                max_length,
                max_lengths=max_lengths,
                prefix=prefix,
                random_uniform=random_uniform,
                ids=ids,
            )
        return beam_search(
            next_fn,
            state,
            batch_size,
            max_length,
            self.size,
            self.length_penalty,
            max_lengths=max_lengths,
            num_hypotheses=self.nbest or 1,
            prefix=prefix,
            **ids,
        )


@dataclasses.dataclass(frozen=True)
class Sampling(Strategy):
    """Tokens drawn from the model's distribution (back-translation, Edunov et al., 2018):
    `kmt.inference.search.sample_search`. Every call draws anew.

    Args:
        top_k: 0 draws from the whole vocabulary, k > 1 from the k most probable tokens. Defaults to `0`.
        temperature: > 0, divides the logits: > 1 flatter, < 1 sharper. Defaults to `1.0`.
        top_p: in (0, 1]: draw from the fewest most probable tokens holding this much probability (nucleus
            sampling); 1 is off. Defaults to `1.0`.
    """

    formats: ClassVar[tuple[str, ...]] = ("run", "savedmodel")

    top_k: int = option(
        0,
        "with beam_size 1: 0 draws each token from the whole distribution, k > 1 from the k most probable "
        "(back-translation, Edunov et al. 2018; OpenNMT-tf's sampling_topk); 1 is greedy search",
        "sampling_topk",
        off=1,
    )
    temperature: float = option(
        1.0, "divides the logits tokens are drawn from: > 1 flatter, < 1 sharper", "sampling_temperature"
    )
    top_p: float = option(
        1.0,
        "with sampling: draw from the fewest most probable tokens holding this much probability (nucleus "
        "sampling; fairseq's --sampling-topp); 1 is off",
        "sampling_topp",
    )

    def __post_init__(self):
        check(self.top_k >= 0, f"sampling_topk must be >= 0. Received: sampling_topk={self.top_k}")
        check(self.top_k != 1, "sampling_topk=1 is greedy search: use Greedy()")
        check(
            self.temperature > 0,
            f"sampling_temperature must be positive. Received: sampling_temperature={self.temperature}",
        )
        check(0 < self.top_p <= 1, f"sampling_topp must be in (0, 1]. Received: sampling_topp={self.top_p}")

    def search(
        self, next_fn, state, batch_size, max_length, *, max_lengths, prefix, random_uniform, ids, constraints=None
    ):
        from kmt.inference.search import sample_search

        if constraints is not None:
            self.require("constraints")
        noise = random_uniform((batch_size, max_length))  # (B, L): one draw a sentence and step
        tokens, scores = sample_search(
            next_fn,
            state,
            batch_size,
            max_length,
            noise,
            self.top_k,
            self.temperature,
            self.top_p,
            max_lengths=max_lengths,
            prefix=prefix,
            **ids,
        )
        return tokens[:, None], scores[:, None]


STRATEGIES = (Greedy, Beam, Sampling)


def strategy_of(values: dict[str, Any]) -> Strategy:
    """The strategy that flat option `values` (every strategy option's name, see `Strategy.options`) describe:
    `Sampling` when `sampling_topk` is not 1, `Beam` when `beam_size` > 1 or `nbest` is set, else `Greedy`."""
    beam_size, topk, topp, nbest = (values[name] for name in ("beam_size", "sampling_topk", "sampling_topp", "nbest"))
    check(beam_size >= 1, f"beam_size must be >= 1. Received: beam_size={beam_size}")
    check(topk >= 0, f"sampling_topk must be >= 0. Received: sampling_topk={topk}")
    check(
        topk == 1 or beam_size == 1,
        f"sampling_topk samples with beam_size=1 only. Received: sampling_topk={topk}, beam_size={beam_size}",
    )
    check(0 < topp <= 1, f"sampling_topp must be in (0, 1]. Received: sampling_topp={topp}")
    temperature = values["sampling_temperature"]  # checked whatever the strategy: a bad value is a typo to report
    check(temperature > 0, f"sampling_temperature must be positive. Received: sampling_temperature={temperature}")
    check(
        topp == 1 or topk != 1,
        "sampling_topp applies to sampling: set sampling_topk=0 (or K > 1) too. "
        f"Received: sampling_topp={topp}, sampling_topk={topk}",
    )
    if topk != 1:
        check(nbest in (None, 1), f"nbest must be 1 to beam_size. Received: nbest={nbest}, beam_size=1")
        chosen = Sampling
    else:
        chosen = Beam if beam_size > 1 or nbest is not None else Greedy
    fields = {f.metadata["name"]: f.name for f in dataclasses.fields(chosen)}
    return chosen(**{field: values[name] for name, field in fields.items()})
