"""kmt.metrics: sacreBLEU scores and the hypothesis / reference length ratio."""

import pytest

from kmt.metrics import sacre_scores


def test_length_ratio_is_hypothesis_over_reference_tokens():
    references = ["a man rides a horse .", "two dogs play in the snow ."]
    assert sacre_scores(references, references)["length_ratio"] == 1.0
    short = sacre_scores(["a man rides", "two dogs play in the snow ."], references)  # 3 + 7 of 6 + 7 tokens
    assert short["length_ratio"] == pytest.approx(10 / 13)
    assert short["bleu"] < sacre_scores(references, references)["bleu"] == pytest.approx(100.0)


def test_tokenized_text_is_scored_without_further_tokenization():
    references = ["ein hund läuft .", "zwei kinder &apos; spielen ."]
    glued = ["ein hund läuft.", "zwei kinder &apos; spielen."]  # 13a splits the full stops off; tok:none does not
    assert sacre_scores(glued, references)["bleu"] == pytest.approx(100.0)
    tokenized = sacre_scores(glued, references, tokenized=True)
    assert tokenized["bleu"] < 50.0 and "tok:none" in tokenized["bleu_signature"]
    assert sacre_scores(references, references, tokenized=True)["bleu"] == pytest.approx(100.0)


def _corpus(count=120, seed=0):
    import random

    rng = random.Random(seed)
    words = "a man woman dog runs sits on the grass beach with two red ball .".split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))) for _ in range(count)]


def _damaged(sentences, share, seed):
    import random

    rng = random.Random(seed)
    return [" ".join(w if rng.random() > share else "x" for w in s.split()) for s in sentences]


def test_paired_bootstrap_tells_a_better_system_from_an_equal_one():
    from kmt.metrics import paired_bootstrap

    references = _corpus()
    baseline = _damaged(references, 0.3, seed=1)
    systems = {
        "baseline": baseline,
        "better": _damaged(references, 0.1, seed=2),
        "as_good": _damaged(references, 0.3, seed=3),
    }  # as many errors as the baseline, elsewhere
    results, signatures = paired_bootstrap(systems, references, tokenized_references=[r.lower() for r in references])
    assert set(signatures) == {"bleu", "chrf", "tokenized_bleu"} and "bs:1000" in signatures["bleu"]
    for metric in signatures:
        assert results["baseline"][metric]["p"] is None and results["baseline"][metric]["ci"] > 0
        assert results["better"][metric]["score"] > results["baseline"][metric]["score"]
        assert results["better"][metric]["p"] < 0.01  # a real difference
        assert results["as_good"][metric]["p"] > 0.05  # a difference chance explains
    assert results["baseline"]["bleu"]["score"] == pytest.approx(sacre_scores(baseline, references)["bleu"])
    again, _ = paired_bootstrap(systems, references)  # seeded: the same intervals and p-values
    assert again["better"]["bleu"] == results["better"]["bleu"]
