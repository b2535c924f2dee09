"""A third architecture is one class plus one `register_model` line: a toy registered here, not in kmt, trains a
smoke run, decodes and exports through kmt's own training, search and export code, which never ask which
architecture they hold."""

import json

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from kmt.checkpoints import load_run_keras, load_run_model  # noqa: E402
from kmt.inference.decoding import search_ids  # noqa: E402
from kmt.models import Seq2SeqModel, Transformer, model_archs, model_class, register_model  # noqa: E402
from tests.helpers import compose_config  # noqa: E402


@keras.saving.register_keras_serializable(package="kmt_tests")
@register_model("toy_prenorm")
class PreNormUntied(Transformer):
    """The Transformer rearranged: pre-norm residuals with a final norm on each stack, and an untied output
    projection, whatever the config says."""

    def __init__(self, vocab_size, **kwargs):
        super().__init__(vocab_size, **kwargs | {"norm_first": True, "tied_output": False})


def test_the_registry_names_kmts_architectures_and_refuses_others():
    assert model_class("transformer") is Transformer and issubclass(model_class("lstm"), Seq2SeqModel)
    assert {"transformer", "lstm", "toy_prenorm"} <= set(model_archs())
    with pytest.raises(ValueError, match="model.arch must be one of .*Received: 'gru'"):
        model_class("gru")


@pytest.mark.slow
def test_a_registered_toy_architecture_trains_decodes_and_exports(tmp_path):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the export needs the TensorFlow backend")
    import tensorflow as tf

    from kmt.api import load
    from kmt.inference.settings import SearchSettings
    from kmt.training import train

    train(compose_config("model.arch=toy_prenorm", "trainer.epochs=1"), tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert "bleu" in metrics["test"] and metrics["export"]["path"] == "export"
    _, vocabularies, model = load_run_keras(tmp_path)
    assert type(model) is PreNormUntied and model.decoder_norm is not None and model.output_projection is not None
    assert type(load_run_model(tmp_path)[2]) is PreNormUntied
    source = vocabularies.source.tokenize(tf.constant(["5 March 1996"])).to_tensor(default_value=0)
    tokens, scores = search_ids(model, source, SearchSettings(beam_size=2))
    assert tokens.shape[0] == 1 and np.isfinite(keras.ops.convert_to_numpy(scores)).all()
    translations = load(tmp_path / "export").translate(["5 March 1996", ""])
    assert len(translations) == 2 and translations[1] == ""
