"""`evaluate`: a translator's output on a test set, scored with sacreBLEU (BLEU, chrF, exact match), the published
Multi30k convention's tokenized BLEU, and other systems compared with the paired bootstrap."""

from collections.abc import Mapping, Sequence
from typing import Any

from kmt.errors import DataError
from kmt.metrics import paired_bootstrap, tokenized_bleu, translation_scores


def evaluate(
    translator: Any,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    tokenized_references: Sequence[str] | None = None,
    lang: str | None = None,
    compare: Mapping[str, Any] | None = None,
    tokenized: bool = False,
    name: str = "this",
) -> dict:
    """Translates `sources` with `translator` and scores the translations against `references`.

    Args:
        translator: what `kmt.load` returns (anything with `translate(lines) -> list[str]`).
        sources: the source sentences.
        references: their reference translations, line-aligned with `sources`.
        tokenized_references: lowercased, Moses-tokenized references (Multi30k's `tok/` copies): adds
            `tokenized_bleu`, the convention published Multi30k results use (not comparable with `bleu`).
            Defaults to `None`.
        lang: the target language, whose Moses rules tokenize the translations for `tokenized_bleu` (needed with
            `tokenized_references`). Defaults to `None`.
        compare: other systems to test against this one on the same sentences, by name: each a translator or the
            list of its translations of `sources`. Adds `compare` (per system and metric: score, bootstrap mean,
            95% half-width, p-value of the difference) and `compare_signatures`. Defaults to `None`.
        tokenized: the text is already lowercased and Moses-tokenized (a model trained with
            `data.tokenized=true`): BLEU splits on spaces only. Defaults to `False`.
        name: this system's name in `compare`'s results. Defaults to `"this"`.

    Returns:
        A dict: `bleu`, `chrf` (with `bleu_signature`, `chrf_signature`), `length_ratio`, `exact_match`,
        `sentences`, `translations` (the list), and the optional keys above.
    """
    if len(sources) != len(references):
        raise DataError(f"{len(sources)} sources but {len(references)} references: they must be line-aligned")
    if tokenized_references is not None:
        if len(tokenized_references) != len(references):
            raise DataError(f"{len(tokenized_references)} tokenized references but {len(references)} references")
        if lang is None:
            raise ValueError("tokenized_references needs lang, the target language (e.g. lang='de')")
    translations = translator.translate(list(sources))
    scores = translation_scores(translations, list(references), tokenized) | {"sentences": len(sources)}
    if tokenized_references is not None:
        scores |= tokenized_bleu(translations, list(tokenized_references), lang)
    if compare:
        systems = {name: translations}
        for other, system in compare.items():
            lines = system.translate(list(sources)) if hasattr(system, "translate") else list(system)
            if len(lines) != len(sources):
                raise DataError(f"{other} has {len(lines)} translations but there are {len(sources)} sources")
            systems[other] = lines
        results, signatures = paired_bootstrap(
            systems,
            list(references),
            tokenized,
            None if tokenized_references is None else list(tokenized_references),
            lang or "en",
        )
        scores |= {"compare": results, "compare_signatures": signatures}
    return scores | {"translations": translations}
