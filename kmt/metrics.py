"""Translation quality: sacreBLEU and chrF on raw text, the lowercased tokenized BLEU of the Multi30k
literature, and exact match.

Two BLEU conventions (see `$KMT_DATA_DIR/multi30k/README.md`):

- `sacre_scores`: sacreBLEU with its default 13a tokenization on cased, detokenized text. Comparable across
  papers that report sacreBLEU, and printed with its signature so anyone can reproduce it.
- `tokenized_bleu`: lowercase, normalize punctuation and Moses-tokenize the hypotheses (sacremoses, with Moses'
  XML escaping), then BLEU with no further tokenization against the lowercased, Moses-tokenized references
  (Multi30k's `tok/*.lc.norm.tok.*`). This is what published Multi30k numbers use; it is not comparable with
  sacreBLEU.
"""

from sacrebleu.metrics import BLEU, CHRF


def _bleu(tokenized):
    """sacreBLEU's BLEU: 13a tokenization on raw text, none (split on spaces) on already tokenized text."""
    return BLEU(tokenize="none", force=True) if tokenized else BLEU()


def sacre_scores(hypotheses, references, tokenized=False):
    """sacreBLEU BLEU and chrF of `hypotheses` against one reference each, with their signatures, and BLEU's
    hypothesis / reference length ratio (13a tokens).

    With `tokenized`, both sides are already Moses-tokenized (a model trained on Multi30k's `tok/` copies,
    `data.tokenized=true`): BLEU, and so the length ratio, splits on spaces only (`tok:none`), the published
    Multi30k convention.
    """
    bleu, chrf = _bleu(tokenized), CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": bleu_score.score,
        "chrf": chrf_score.score,
        "length_ratio": bleu_score.sys_len / max(bleu_score.ref_len, 1),  # below 1: BLEU's brevity penalty bites
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def moses_tokenize(sentences, lang):
    """Lowercase, normalize punctuation and tokenize the way Multi30k's `tok/` files were made."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    normalizer, tokenizer = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    return [tokenizer.tokenize(normalizer.normalize(s.lower()), return_str=True, escape=True) for s in sentences]


def moses_languages():
    """The language codes whose Moses rules sacremoses has (`en`, `de`, `fr`, `cs`, `es`, ...)."""
    from sacremoses.corpus import NonbreakingPrefixes

    return set(NonbreakingPrefixes().available_langs.values())


def tokenized_bleu(hypotheses, tokenized_references, lang):
    """BLEU of Moses-tokenized, lowercased `hypotheses` against already tokenized references (no 13a)."""
    bleu = _bleu(tokenized=True)
    score = bleu.corpus_score(moses_tokenize(hypotheses, lang), [tokenized_references])
    return {"tokenized_bleu": score.score, "tokenized_bleu_signature": str(bleu.get_signature())}


def paired_bootstrap(systems, references, tokenized=False, tokenized_references=None, lang="en", samples=1000):
    """sacreBLEU's paired bootstrap resampling (Koehn, 2004) of several systems' outputs on one test set.

    Args:
        systems: dict of name -> hypotheses (lists of str, line-aligned with `references`); the first is the
            baseline the others are tested against.
        references: list of str.
        tokenized: bool. Text already tokenized (as in `sacre_scores`). Defaults to `False`.
        tokenized_references: list of str or None. Also test `tokenized_bleu` against these. Defaults to `None`.
        lang: str. Moses tokenization language for `tokenized_references`. Defaults to `"en"`.
        samples: int. Bootstrap resamples. Defaults to `1000`, sacreBLEU's.

    Returns:
        `(results, signatures)`: `{name: {metric: {"score", "mean", "ci", "p"}}}` for the metrics `bleu`, `chrf`
        (and `tokenized_bleu`): the corpus score, the bootstrap mean and the half-width of its 95% confidence
        interval, and the p-value of the system's difference from the baseline (None for the baseline); and
        `{metric: signature}`. The resampling is seeded (`SACREBLEU_SEED`, 12345 unless set), so it reproduces.
    """
    from sacrebleu.significance import PairedTest

    tests = {"bleu": (_bleu(tokenized), references, None), "chrf": (CHRF(), references, None)}
    if tokenized_references is not None:
        tests["tokenized_bleu"] = (
            _bleu(tokenized=True),
            tokenized_references,
            lambda hypotheses: moses_tokenize(hypotheses, lang),
        )
    results = {name: {} for name in systems}
    signatures = {}
    for key, (metric, metric_references, prepare) in tests.items():
        named = [(name, prepare(hypotheses) if prepare else hypotheses) for name, hypotheses in systems.items()]
        test = PairedTest(named, {key: metric}, [metric_references], test_type="bs", n_samples=samples)
        signature, scores = test()
        [column] = [name for name in scores if name != "System"]
        signatures[key] = str(signature[column])
        for name, result in zip(scores["System"], scores[column]):
            results[name][key] = {
                field: None if value is None else float(value)
                for field, value in (
                    ("score", result.score),
                    ("mean", result.mean),
                    ("ci", result.ci),
                    ("p", result.p_value),
                )
            }
    return results, signatures


def exact_match(hypotheses, references):
    """Share of hypotheses equal to their reference after stripping outer whitespace."""
    if not references:
        return 0.0
    return sum(h.strip() == r.strip() for h, r in zip(hypotheses, references)) / len(references)


def translation_scores(hypotheses, references, tokenized=False):
    """Every score kmt reports on its output: BLEU, chrF (with signatures) and exact match; `tokenized` as in
    `sacre_scores`."""
    return sacre_scores(hypotheses, references, tokenized) | {"exact_match": exact_match(hypotheses, references)}
