"""kmt.scoring: sacreBLEU scores and the hypothesis / reference length ratio."""

import pytest

from kmt.scoring import sacre_scores


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
