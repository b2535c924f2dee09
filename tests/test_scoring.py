"""kmt.scoring: sacreBLEU scores and the hypothesis / reference length ratio."""

import pytest

from kmt.scoring import sacre_scores


def test_length_ratio_is_hypothesis_over_reference_tokens():
    references = ["a man rides a horse .", "two dogs play in the snow ."]
    assert sacre_scores(references, references)["length_ratio"] == 1.0
    short = sacre_scores(["a man rides", "two dogs play in the snow ."], references)  # 3 + 7 of 6 + 7 tokens
    assert short["length_ratio"] == pytest.approx(10 / 13)
    assert short["bleu"] < sacre_scores(references, references)["bleu"] == pytest.approx(100.0)
