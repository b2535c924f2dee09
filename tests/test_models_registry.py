"""A third architecture is one module plus one `register_model` line: a toy registered from the tests, not in kmt
(tests/toy_architecture.py: parallel residual blocks), trains a smoke run, decodes and exports through kmt's own
training, search and export code, which never ask which architecture they hold."""

import json

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from kmt.checkpoints import load_run_keras, load_run_model  # noqa: E402
from kmt.inference.decoding import search_ids  # noqa: E402
from kmt.models import Seq2SeqModel, Transformer, model_archs, model_class  # noqa: E402
from tests.helpers import compose_config  # noqa: E402
from tests.toy_architecture import ParallelTransformer  # noqa: E402  (registers model.arch=toy_parallel)


def test_the_registry_names_kmts_architectures_and_refuses_others():
    assert model_class("transformer") is Transformer and issubclass(model_class("lstm"), Seq2SeqModel)
    assert {"transformer", "lstm", "toy_parallel"} <= set(model_archs())
    with pytest.raises(ValueError, match="model.arch must be one of .*Received: 'gru'"):
        model_class("gru")


@pytest.mark.e2e
def test_a_registered_toy_architecture_trains_decodes_and_exports(tmp_path):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the export needs the TensorFlow backend")
    import tensorflow as tf

    from kmt.api import load
    from kmt.inference.settings import SearchSettings
    from kmt.training import train

    train(compose_config("model.arch=toy_parallel", "trainer.epochs=1"), tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert "bleu" in metrics["test"] and metrics["export"]["path"] == "export"
    _, vocabularies, model = load_run_keras(tmp_path)
    assert type(model) is ParallelTransformer and model.decoder_layers[0].cross_attention is not None
    assert type(load_run_model(tmp_path)[2]) is ParallelTransformer
    source = vocabularies.source.tokenize(tf.constant(["5 March 1996"])).to_tensor(default_value=0)
    tokens, scores = search_ids(model, source, SearchSettings.of(beam_size=2))
    assert tokens.shape[0] == 1 and np.isfinite(keras.ops.convert_to_numpy(scores)).all()
    translations = load(tmp_path / "export").translate(["5 March 1996", ""])
    assert len(translations) == 2 and translations[1] == ""


def test_the_toy_architectures_cached_steps_give_its_teacher_forced_logits():
    model = ParallelTransformer(vocab_size=20, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16)
    source = keras.ops.convert_to_tensor([[5, 6, 7, 0], [8, 9, 0, 0]], dtype="int32")
    tokens = keras.ops.convert_to_tensor([[1, 4, 5, 6], [1, 7, 8, 9]], dtype="int32")
    encoder_outputs, source_mask = model.encode(source)
    expected = model.decode(tokens, encoder_outputs, source_mask)  # (2, 4, 20)
    context = model.decoding_context(encoder_outputs, source_mask)
    state = model.initial_state(encoder_outputs, source_mask, 3)
    for index in range(4):
        logits, state = model.decode_step(tokens, index, state, context)
        np.testing.assert_allclose(logits, expected[:, index], atol=1e-5)
    assert len(model.residual_dropouts()) == 2 + 2 + 3  # the embeddings', the encoder block's, the decoder block's
