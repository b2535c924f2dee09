"""Runs made before issue 77 turned the models into classes (tests/fixtures/pre77, see its README) load and
translate as they did: a Transformer's and an LSTM's model.keras, the model rebuilt from config.yaml and the last
epoch's weights, and the resume state."""

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "tensorflow":
    pytest.skip("the translator needs the TensorFlow backend", allow_module_level=True)

from kmt.build import build_model, build_schedule, compile_model  # noqa: E402
from kmt.checkpoints import load_run_keras, load_run_model  # noqa: E402
from kmt.inference.decoding import search_ids  # noqa: E402
from kmt.inference.loading import load_translator  # noqa: E402
from kmt.inference.settings import SearchSettings  # noqa: E402
from kmt.inference.translator import TranslatorModule  # noqa: E402
from kmt.run_dir import RunDir  # noqa: E402
from kmt.tokenizer import Vocabularies  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "pre77"
RECORD = json.loads((FIXTURE / "translations.json").read_text(encoding="utf-8"))
INPUTS = RECORD["inputs"]
ARCHS = ["transformer", "lstm"]


DECODE = SearchSettings.of(beam_size=3, length_penalty=0.6, max_length_a=1.5, max_length_b=10)  # the recorded ones


@pytest.fixture(scope="module", params=ARCHS)
def run(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(f"pre77_{request.param}")
    with tarfile.open(FIXTURE / f"{request.param}.tar.xz") as tar:
        tar.extractall(directory, filter="data")
    return request.param, directory


def assert_same(recorded, translations, scores):
    assert translations == recorded["translations"]
    np.testing.assert_allclose(scores, recorded["scores"], rtol=1e-5, atol=1e-5)


def translate(model, vocabularies, beam_size):
    module = TranslatorModule(model, vocabularies, DECODE if beam_size == 3 else DECODE.greedy())
    outputs = module.translate(tf.constant(INPUTS))
    return [t.decode() for t in outputs["translation"].numpy()], outputs["score"].numpy()


@pytest.mark.e2e
def test_model_keras_translates_as_before(run):
    arch, directory = run
    _, vocabularies, model = load_run_keras(directory)  # a plain functional model in the file: rebuilt, its weights
    for beam_size in (1, 3):
        assert_same(RECORD[f"{arch}_model_keras_beam{beam_size}"], *translate(model, vocabularies, beam_size))
        recorded = RECORD[f"{arch}_ids_beam{beam_size}"]
        tokens, scores = search_ids(
            model, np.array(recorded["source"], "int32"), SearchSettings.of(beam_size=beam_size)
        )
        assert keras.ops.convert_to_numpy(tokens).tolist() == recorded["tokens"]
        np.testing.assert_allclose(keras.ops.convert_to_numpy(scores), recorded["scores"], rtol=1e-5, atol=1e-5)


def test_weights_rebuilt_from_config_translate_as_before(run):
    arch, directory = run
    _, vocabularies, model = load_run_model(directory, "last")
    for beam_size in (1, 3):
        assert_same(RECORD[f"{arch}_rebuilt_beam{beam_size}"], *translate(model, vocabularies, beam_size))


def test_resume_state_loads_into_the_model_training_builds(run):
    _, directory = run
    run_dir = RunDir(directory)
    cfg = run_dir.read_config()
    vocabularies = Vocabularies.load(directory / "tokenizer")
    sizes = vocabularies.source.vocab_size, vocabularies.target.vocab_size
    schedule = build_schedule(cfg.optim, cfg.model.hidden_dim, 18)
    model = compile_model(build_model(cfg.model, *sizes), cfg.optim, schedule, cfg.trainer.jit_compile)
    model.load_weights(run_dir.checkpoints.backup / "latest.weights.h5")
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 18  # 3 epochs of 6 updates
    assert run_dir.checkpoints.resume_state()["epoch"] == 3
    last = build_model(cfg.model, *sizes, "float32")
    last.load_weights(run_dir.checkpoints.find("last"))
    for ours, theirs in zip(model.get_weights(), last.get_weights()):
        np.testing.assert_array_equal(ours, theirs)


def test_the_run_directory_loads_with_kmt_load(run):
    arch, directory = run
    translator = load_translator(directory)  # what kmt.load opens: the model rebuilt, the run's last epoch
    best = translator.translate(INPUTS, settings=DECODE, nbest=1)
    assert_same(RECORD[f"{arch}_rebuilt_beam3"], [h[0].text for h in best], [h[0].score for h in best])
