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
from kmt.cli.common import load_export  # noqa: E402
from kmt.inference.decoding import search_ids  # noqa: E402
from kmt.inference.translator import build_translator  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "pre57"
RECORD = json.loads((FIXTURE / "translations.json").read_text(encoding="utf-8"))
INPUTS = RECORD["inputs"]


class Decode:  # the fixture's decode settings (config.yaml's decode group)
    beam_size, length_penalty, max_length_a, max_length_b = 3, 0.6, 1.5, 10
    sampling_topk, sampling_temperature, sampling_topp = 1, 1.0, 1.0


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
    translator = build_translator(model, vocabularies, Decode, beam_size=1 if beam_size == 1 else None)
    outputs = translator.translate(tf.constant(INPUTS))
    return [t.decode() for t in outputs["translation"].numpy()], outputs["score"].numpy()


@pytest.mark.parametrize("beam_size", [1, 3])
def test_model_keras_translates_as_before(run, beam_size):
    _, vocabularies, model = load_run_keras(run)  # a plain functional model in the file: rebuilt, its weights loaded
    assert_same(RECORD[f"model_keras_beam{beam_size}"], *translate(model, vocabularies, beam_size))
    recorded = RECORD[f"ids_beam{beam_size}"]
    tokens, scores = search_ids(model, np.array(recorded["source"], "int32"), beam_size=beam_size)
    assert keras.ops.convert_to_numpy(tokens).tolist() == recorded["tokens"]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(scores), recorded["scores"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_weights_rebuilt_from_config_translate_as_before(run, beam_size):
    _, vocabularies, model = load_run_model(run, "last")
    assert_same(RECORD[f"rebuilt_beam{beam_size}"], *translate(model, vocabularies, beam_size))


def test_export_translates_as_before(run):
    outputs = load_export(run / "export")(text=tf.constant(INPUTS))
    assert_same(RECORD["export"], [t.decode() for t in outputs["translation"].numpy()], outputs["score"].numpy())
    outputs = load_export(run / "export", "translate_nbest")(text=tf.constant(INPUTS))
    recorded = RECORD["export_nbest"]
    assert [[t.decode() for t in row] for row in outputs["translations"].numpy()] == recorded["translations"]
    np.testing.assert_allclose(outputs["scores"].numpy(), recorded["scores"], rtol=1e-5, atol=1e-5)
