"""A run made before issue 57's restructuring (tests/fixtures/pre57, see its README) loads and translates as it
did: its model.keras, the model rebuilt from its config.yaml and last epoch's weights, and its SavedModel."""

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "tensorflow":
    pytest.skip("the translator and the SavedModel need the TensorFlow backend", allow_module_level=True)

from kmt.checkpoints import load_run_keras, load_run_model  # noqa: E402
from kmt.inference.decoding import search_ids  # noqa: E402
from kmt.inference.keras_translator import KerasTranslator  # noqa: E402
from kmt.inference.loading import load_translator  # noqa: E402
from kmt.inference.saved_model_translator import SavedModelTranslator  # noqa: E402
from kmt.inference.settings import SearchSettings  # noqa: E402
from kmt.inference.translator import TranslatorModule  # noqa: E402
from kmt.inference.translators import Hypothesis  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "pre57"
RECORD = json.loads((FIXTURE / "translations.json").read_text(encoding="utf-8"))
INPUTS = RECORD["inputs"]


DECODE = SearchSettings.of(beam_size=3, length_penalty=0.6, max_length_a=1.5, max_length_b=10)  # the fixture's


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pre57")
    with tarfile.open(FIXTURE / "run.tar.xz") as tar:
        tar.extractall(directory, filter="data")
    return directory


def assert_same(recorded, translations, scores):
    assert translations == recorded["translations"]
    np.testing.assert_allclose(scores, recorded["scores"], rtol=1e-5, atol=1e-5)


def translate(model, vocabularies, beam_size):
    module = TranslatorModule(model, vocabularies, DECODE if beam_size == 3 else DECODE.greedy())
    outputs = module.translate(tf.constant(INPUTS))
    return [t.decode() for t in outputs["translation"].numpy()], outputs["score"].numpy()


@pytest.mark.parametrize("beam_size", [1, 3])
def test_model_keras_translates_as_before(run, beam_size):
    _, vocabularies, model = load_run_keras(run)  # a plain functional model in the file: rebuilt, its weights loaded
    assert_same(RECORD[f"model_keras_beam{beam_size}"], *translate(model, vocabularies, beam_size))
    recorded = RECORD[f"ids_beam{beam_size}"]
    tokens, scores = search_ids(model, np.array(recorded["source"], "int32"), SearchSettings.of(beam_size=beam_size))
    assert keras.ops.convert_to_numpy(tokens).tolist() == recorded["tokens"]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(scores), recorded["scores"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_weights_rebuilt_from_config_translate_as_before(run, beam_size):
    _, vocabularies, model = load_run_model(run, "last")
    assert_same(RECORD[f"rebuilt_beam{beam_size}"], *translate(model, vocabularies, beam_size))


def test_the_run_directory_translates_as_before(run):
    translator = load_translator(run)  # the model rebuilt from config.yaml and the last epoch, the run's settings
    assert isinstance(translator, KerasTranslator) and translator.settings == DECODE
    best = translator.translate(INPUTS, nbest=1)
    assert_same(RECORD["rebuilt_beam3"], [h[0].text for h in best], [h[0].score for h in best])
    assert translator.translate(INPUTS) == [h[0].text for h in best]


def test_export_translates_as_before(run):
    translator = load_translator(run / "export")
    assert isinstance(translator, SavedModelTranslator) and translator.settings is None
    best = translator.translate(INPUTS, nbest=1)
    assert_same(RECORD["export"], [h[0].text for h in best], [h[0].score for h in best])
    nbest = translator.translate(INPUTS, nbest=3)
    assert all(isinstance(h, Hypothesis) for row in nbest for h in row)
    recorded = RECORD["export_nbest"]
    assert [[h.text for h in row] for row in nbest] == recorded["translations"]
    np.testing.assert_allclose([[h.score for h in row] for row in nbest], recorded["scores"], rtol=1e-5, atol=1e-5)
