"""`load_translator`: one function tells a run directory, a SavedModel and a CTranslate2 directory apart, and each
opens as a `Translator` that translates and scores as the others do; anything else stops in one line."""

import importlib.util
import math

import numpy as np
import pytest

from kmt.errors import KmtError
from kmt.inference.keras_translator import KerasTranslator
from kmt.inference.loading import load_translator, translator_kind
from kmt.inference.saved_model_translator import SavedModelTranslator
from kmt.inference.translators import Hypothesis

LINES = ["Tuesday, March 5, 1996", "", "the third of May 2001", "12/31/1999"]


@pytest.fixture(scope="module")
def ctranslate2_dir(smoke_run, tmp_path_factory):
    if importlib.util.find_spec("ctranslate2") is None:
        pytest.skip('needs CTranslate2: pip install "kmt[ctranslate2]"')
    from kmt.inference.ctranslate2 import export_ctranslate2

    translator = load_translator(smoke_run)
    directory = tmp_path_factory.mktemp("ct2") / "ct2"
    export_ctranslate2(translator.model, translator.vocabularies, translator.settings.greedy(), directory)
    return directory


def test_a_run_and_its_savedmodel_translate_and_score_alike(smoke_run):
    run, export = load_translator(smoke_run), load_translator(smoke_run / "export")
    assert isinstance(run, KerasTranslator) and isinstance(export, SavedModelTranslator)
    assert (translator_kind(smoke_run), translator_kind(smoke_run / "export")) == ("run", "savedmodel")
    assert run.settings.beam_size == 1  # debug=smoke's greedy export
    # serving_default wraps translate's function: one callable, set up once; the others are their own
    assert export.signatures["serving_default"] is export.signatures["translate"]
    others = [export.signatures[name] for name in export.signatures if name != "serving_default"]
    assert len(set(map(id, others))) == len(others) == 7
    assert run.translate(LINES) == export.translate(LINES)
    assert run.translate(LINES)[1] == ""
    best = run.translate(LINES, nbest=1)
    assert all(isinstance(row[0], Hypothesis) for row in best) and best[1] == [Hypothesis("", 0.0)]
    assert [row[0].score for row in best] == pytest.approx(
        [row[0].score for row in export.translate(LINES, nbest=1)], abs=1e-4
    )
    targets = [row[0].text for row in best]
    scored, exported = run.score(LINES, targets), export.score(LINES, targets)
    assert [s.tokens for s in scored] == [s.tokens for s in exported]
    np.testing.assert_allclose([s.log_probability for s in scored], [s.log_probability for s in exported], atol=1e-4)
    assert math.isnan(scored[1].log_probability)  # an empty source is not scored
    beam = run.settings.replace(beam_size=3)  # a run searches with any settings; a SavedModel's are baked in
    assert len(run.translate(LINES, settings=beam, nbest=3)[0]) == 3
    with pytest.raises(KmtError, match="search settings are baked in"):
        export.translate(LINES, settings=beam)
    with pytest.raises(ValueError, match="nbest must be 1 to beam_size. Received: nbest=2, beam_size=1"):
        run.translate([], nbest=2)  # checked before any line is translated


def test_a_ctranslate2_directory_translates_as_the_run(smoke_run, ctranslate2_dir):
    from kmt.inference.ctranslate2 import CT2Translator

    translator = load_translator(ctranslate2_dir, compute_type="float32")
    assert isinstance(translator, CT2Translator) and translator_kind(ctranslate2_dir) == "ctranslate2"
    run = load_translator(smoke_run)
    assert translator.translate(LINES) == run.translate(LINES)
    with pytest.raises(
        KmtError,
        match=r"a CTranslate2 directory cannot decode with Beam\(size=2, .*nbest=2\); a run directory or a SavedModel",
    ):
        translator.translate(LINES, settings=translator.settings.replace(beam_size=2), nbest=2)


def test_anything_else_is_one_line(tmp_path, smoke_run):
    for path in (tmp_path, tmp_path / "missing"):
        with pytest.raises(KmtError) as error:
            load_translator(path)
        assert str(error.value) == (
            f"{path} is not a kmt run directory (config.yaml), SavedModel export "
            "(saved_model.pb) or CTranslate2 directory; pass a run, its export/ or the output "
            "of kmt-export --format ctranslate2"
        )
    with pytest.raises(KmtError, match="picks a run directory's weights"):
        load_translator(smoke_run / "export", checkpoint="best")
