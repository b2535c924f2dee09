"""`SearchSettings`: how a model searches for translations, as one frozen value: the length limits and one
strategy (`kmt.inference.strategies`: `Greedy`, `Beam`, `Sampling`).

Built once, from a run's `decode` section (`SearchSettings.from_config`), from flat options (`SearchSettings.of`) or
from command-line flags (`settings.replace(beam_size=args.beam_size)`), and passed whole to
`kmt.inference.decoding.search_ids`, the SavedModel export and every translator.

Example:
>>> settings = SearchSettings.of(beam_size=5)
>>> settings.strategy
Beam(size=5, length_penalty=0.6, nbest=None)
>>> settings.replace(beam_size=None, length_penalty=1.0).strategy  # None: a flag not given, the value stays
Beam(size=5, length_penalty=1.0, nbest=None)
>>> settings.replace(sampling_topk=0).strategy  # sampling draws one translation: the beam goes
Sampling(top_k=0, temperature=1.0, top_p=1.0)
"""

import dataclasses
from typing import Any

from kmt.inference.strategies import (  # noqa: F401  (SettingsError: where callers have always found it)
    STRATEGIES,
    Beam,
    Greedy,
    Option,
    Sampling,
    SettingsError,
    Strategy,
    check,
    option,
    options_of,
    strategy_of,
)


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """The length limits and one `Strategy`; checked when made (`SettingsError`, a `ValueError`, naming the value).

    Sentence i of a batch emits at most `min(max_length, ceil(max_length_a * S_i + max_length_b))` tokens, S_i being
    its count of source tokens.

    Args:
        strategy: the `Strategy` that searches. Defaults to `Beam()`: 4 beams, length penalty 0.6.
        max_length_a: float, the output limit's slope in S_i. Defaults to `1.5`.
        max_length_b: float, the output limit's intercept. Defaults to `10`.
        max_length: int cap on the output length. Defaults to `None`: the model's `max_length`.

    The strategy's options read as attributes too, by their flat names (`settings.beam_size`, `settings.nbest`,
    `settings.sampling_topk`, ...: `Strategy.options`).
    """

    strategy: Strategy = Beam()
    max_length_a: float = option(
        1.5, "output limit: a * source length + b tokens (capped by model.max_length)", "max_length_a"
    )
    max_length_b: int = option(10, "the b of the output limit above", "max_length_b")
    max_length: int | None = option(None, "cap on the output length; null: the model's", "max_length", config=False)

    def __post_init__(self):
        check(isinstance(self.strategy, Strategy), f"strategy must be a Strategy. Received: {self.strategy!r}")
        check(
            self.max_length is None or self.max_length >= 1,
            f"max_length must be >= 1. Received: max_length={self.max_length}",
        )

    @classmethod
    def of(cls, **values) -> "SearchSettings":
        """Settings from flat options (`OPTIONS`' names: `beam_size=5`, `sampling_topk=0`, ...), the others at their
        defaults; the strategy is the one they describe (`kmt.inference.strategies.strategy_of`)."""
        unknown = set(values) - {o.name for o in OPTIONS}
        check(not unknown, f"unknown search options: {', '.join(sorted(unknown))}")
        flat = {**SearchSettings().options(), **values}
        limits = {f.name: flat[f.metadata["name"]] for f in dataclasses.fields(cls) if "name" in f.metadata}
        return cls(strategy_of(flat), **limits)

    @classmethod
    def from_config(cls, decode) -> "SearchSettings":
        """The settings of a run's `decode` section (a `kmt.config.DecodeConfig`, its `DictConfig`, or a mapping)."""
        get = decode.get if hasattr(decode, "get") else lambda name, default: getattr(decode, name, default)
        return cls.of(**{o.name: get(o.name, None) for o in OPTIONS if get(o.name, None) is not None})

    def options(self) -> dict[str, Any]:
        """Every flat option's value (the strategy's own, the other strategies' `off` values, the limits)."""
        limits = {f.metadata["name"]: getattr(self, f.name) for f in dataclasses.fields(self) if "name" in f.metadata}
        return {**self.strategy.options(), **limits}

    def __getattr__(self, name):  # the strategy's options by flat name: settings.beam_size
        if name in STRATEGY_OPTIONS:
            return self.strategy.options()[name]
        raise AttributeError(f"'SearchSettings' object has no attribute '{name}'")

    @property
    def sampling(self) -> bool:
        """Whether tokens are drawn at random rather than searched for."""
        return isinstance(self.strategy, Sampling)

    def replace(self, **changes) -> "SearchSettings":
        """A copy with flat `changes`; a change of None (a flag not given) leaves its value. Changing the beam size
        alone turns sampling off, and asking for sampling alone sets the beam size to 1 (sampling draws one
        translation), so a run's sampling settings never clash with a beam asked for, nor its beam with sampling."""
        changes = {name: value for name, value in changes.items() if value is not None}
        flat = self.options()
        if "beam_size" in changes and "sampling_topk" not in changes:
            changes["sampling_topk"] = 1
            if flat["sampling_topp"] != 1 and "sampling_topp" not in changes:
                changes["sampling_topp"] = 1.0
        if changes.get("sampling_topk", 1) != 1 and "beam_size" not in changes:
            changes["beam_size"] = 1
        return SearchSettings.of(**{**flat, **changes})

    def greedy(self) -> "SearchSettings":
        """Greedy search with these length limits (what scores val during training)."""
        return dataclasses.replace(self, strategy=Greedy())


OPTIONS: list[Option] = [  # every flat option, declared once: strategies first, then the length limits
    *{o.name: o for cls in STRATEGIES for o in options_of(cls)}.values(),
    *options_of(SearchSettings),
]
STRATEGY_OPTIONS = {o.name for cls in STRATEGIES for o in options_of(cls)}
