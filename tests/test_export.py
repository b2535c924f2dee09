"""The SavedModel: text in, text out, reloaded in a fresh process, inspected with saved_model_cli."""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from kmt.data.dates import generate_date_pairs
from kmt.inference.decoding import search_ids
from kmt.inference.export import export_translator
from kmt.inference.graph_merge import merge_duplicate_nodes
from kmt.inference.score import score_ids
from kmt.inference.settings import SearchSettings
from kmt.inference.translator import TranslatorModule
from kmt.models import Transformer
from kmt.tokenizer import Vocabularies

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="SavedModels need TensorFlow")

SENTENCES = ["Tuesday, March 5, 1996", "", "   ", "the 1st of june 2031", "x" * 10_000, "日本語 😀 مرحبا"]


@pytest.fixture(scope="module")
def model_and_vocabularies():
    pairs = generate_date_pairs(300, seed=0)
    vocabularies = Vocabularies.train([s for s, _ in pairs], [t for _, t in pairs], joint=True, vocab_size=320)
    model = Transformer(
        vocabularies.source.vocab_size, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32, max_length=24
    )
    # Seeded weights, so that what the tests read off the translations holds in every run (Keras's unseeded
    # initializers gave a model that ended every sentence at once now and then); not keras.utils.set_random_seed,
    # which would delete the tokenizers' resources.
    rng = np.random.default_rng(3)
    model.set_weights([rng.normal(0.0, 0.3, w.shape).astype(w.dtype) for w in model.get_weights()])
    return model, vocabularies


@pytest.fixture(scope="module")
def translator(model_and_vocabularies):
    model, vocabularies = model_and_vocabularies
    return TranslatorModule(model, vocabularies, SearchSettings.of(beam_size=3, max_length_b=5)), model


def _reload_and_translate(export_dir, sentences):
    script = (
        "import json, sys, tensorflow as tf, tensorflow_text\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "text = tf.constant(json.loads(sys.argv[2]))\n"
        "out, nbest = m.signatures['translate'](text=text), m.signatures['translate_nbest'](text=text)\n"
        "scored = m.signatures['score'](source=text, target=out['translation'])\n"
        "print(json.dumps([[t.decode() for t in out['translation'].numpy()], nbest['translations'].numpy().shape,\n"
        "                  [t.decode() for t in nbest['translations'].numpy()[:, 0]],\n"
        "                  scored['score'].numpy().tolist()]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(export_dir), json.dumps(sentences)],
        capture_output=True,
        text=True,
        env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_one_output_per_input_empty_in_empty_out(translator):
    translator, _ = translator
    outputs = translator.translate(text=__import__("tensorflow").constant(SENTENCES))
    translations = [t.decode() for t in outputs["translation"].numpy()]
    assert len(translations) == len(SENTENCES) and outputs["score"].shape == (len(SENTENCES),)
    assert translations[1] == "" and translations[2] == ""


@pytest.mark.parametrize("beam_size", [1, 3])
def test_nbest_signature_lists_the_beam_best_first(model_and_vocabularies, beam_size):
    model, vocabularies = model_and_vocabularies
    translator = TranslatorModule(model, vocabularies, SearchSettings.of(beam_size=beam_size, max_length_b=5))
    text = tf.constant(SENTENCES)
    best, nbest = translator.translate(text=text), translator.translate_nbest(text=text)
    translations, scores = nbest["translations"].numpy(), nbest["scores"].numpy()
    assert translations.shape == scores.shape == (len(SENTENCES), beam_size)
    assert translations[:, 0].tolist() == best["translation"].numpy().tolist()
    np.testing.assert_allclose(scores[:, 0], best["score"].numpy(), atol=1e-5)
    assert (np.diff(scores, axis=1) <= 1e-6).all()
    assert translations[1].tolist() == [b""] * beam_size and (scores[1:3] == 0).all()  # empty in, empty out


def test_a_sampling_export_draws_new_translations_at_every_call(model_and_vocabularies, tmp_path):
    model, vocabularies = model_and_vocabularies
    sentences = ["Tuesday, March 5, 1996", "the 1st of june 2031", ""] * 4
    sampling = SearchSettings.of(beam_size=1, sampling_topk=0, max_length_b=5)
    export_translator(TranslatorModule(model, vocabularies, sampling), tmp_path / "s")
    translate = tf.saved_model.load(str(tmp_path / "s")).signatures["translate"]
    first, second = (translate(text=tf.constant(sentences)) for _ in range(2))
    assert first["translation"].numpy().tolist() != second["translation"].numpy().tolist()  # 8 draws of ~300 tokens
    assert first["translation"].numpy()[2] == b"" and first["score"].numpy()[2] == 0  # empty in, empty out


@pytest.mark.parametrize("beam_size", [1, 3])
def test_uncached_translator_gives_the_cached_translations(model_and_vocabularies, beam_size):
    model, vocabularies = model_and_vocabularies
    text = tf.constant(SENTENCES)
    cached, uncached = (
        TranslatorModule(
            model, vocabularies, SearchSettings.of(beam_size=beam_size, max_length_b=5), use_cache=use_cache
        ).translate(text=text)
        for use_cache in (True, False)
    )
    assert cached["translation"].numpy().tolist() == uncached["translation"].numpy().tolist()
    np.testing.assert_allclose(cached["score"].numpy(), uncached["score"].numpy(), atol=1e-4)


def test_score_signature_is_forced_decoding_of_the_tokenized_pairs(translator, model_and_vocabularies):
    """`score` tokenizes each pair and returns `score_ids` of it; pairs it cannot score whole get NaN."""
    translator, model = translator
    tokenizer = model_and_vocabularies[1].source  # joint
    sources = ["Tuesday, March 5, 1996", "the 1st of june 2031", "", "x" * 10_000, "5 june 2001", "1 May 1990"]
    targets = ["1996-03-05", "2031-06-01", "2000-01-01", "1990-01-01", "", "1990-05-01 " * 20]
    outputs = translator.score(source=tf.constant(sources), target=tf.constant(targets))
    scores, lengths = outputs["score"].numpy(), outputs["length"].numpy()
    assert scores.dtype == np.float32 and lengths.dtype == np.int32
    source_ids, target_ids = (tokenizer.tokenize(tf.constant(texts)) for texts in (sources, targets))
    np.testing.assert_array_equal(lengths, target_ids.row_lengths().numpy() + 1)
    assert lengths[4] == 1 and lengths[5] > 24  # an empty target is its end token; the last one does not fit
    scorable = [0, 1, 4]
    pick = lambda ids: tf.gather(ids, scorable).to_tensor()  # noqa: E731
    expected, _ = score_ids(model, pick(source_ids), pick(target_ids))
    np.testing.assert_allclose(scores[scorable], expected.numpy(), atol=1e-5)
    assert np.isnan(scores[[2, 3, 5]]).all()  # empty source, over-long source, over-long target
    assert (scores[scorable] < 0).all()


@pytest.mark.e2e
def test_fresh_process_reload_matches_in_process(translator, tmp_path):
    translator, model = translator
    size = export_translator(translator, tmp_path / "export")
    expected = texts(translator, SENTENCES)
    translations, nbest_shape, nbest_first, scores = _reload_and_translate(tmp_path / "export", SENTENCES)
    assert translations == expected
    assert nbest_shape == [len(SENTENCES), 3] and nbest_first == expected
    in_process = translator.score(source=tf.constant(SENTENCES), target=tf.constant(expected))["score"].numpy()
    np.testing.assert_allclose(scores, in_process, atol=1e-5)
    weights = sum(w.numpy().nbytes for w in model.weights)
    variables = sum(f.stat().st_size for f in (tmp_path / "export" / "variables").iterdir())
    assert variables < 1.5 * weights  # each weight written once, no optimizer state
    assert size > variables


def test_saved_model_cli_lists_the_string_signatures(translator, tmp_path):
    translator, _ = translator
    export_translator(translator, tmp_path / "export")
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    result = subprocess.run(
        [cli, "show", "--dir", str(tmp_path / "export"), "--all"],
        capture_output=True,
        text=True,
        env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for signature in ("translate", "serving_default"):
        block = result.stdout.split(f"signature_def['{signature}']")[1].split("signature_def[")[0]
        assert "inputs['text']" in block and "dtype: DT_STRING" in block
        assert "outputs['translation']" in block and "outputs['score']" in block
    block = result.stdout.split("signature_def['translate_nbest']")[1].split("signature_def[")[0]
    assert "inputs['text']" in block
    translations = block.split("outputs['translations']")[1]
    assert "dtype: DT_STRING" in translations and "shape: (-1, 3)" in translations  # K, the beam size, is static
    assert "outputs['scores']" in block
    block = result.stdout.split("signature_def['score']")[1].split("signature_def[")[0]
    assert "inputs['source']" in block and "inputs['target']" in block
    assert "outputs['score']" in block and "DT_FLOAT" in block and "outputs['length']" in block and "DT_INT32" in block


def test_export_replaces_an_old_export_whole(translator, tmp_path):
    translator, _ = translator
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "stale.txt").write_text("old")
    export_translator(translator, tmp_path / "export")
    assert not (tmp_path / "export" / "stale.txt").exists()
    assert not list(tmp_path.glob(".partial-*"))  # no temporary left behind


def texts(module, sentences):
    """A `TranslatorModule`'s translations of a list of str."""
    return [t.decode("utf-8") for t in module.translate(text=tf.constant(sentences))["translation"].numpy()]


@pytest.mark.e2e
def test_an_ensemble_export_decodes_and_scores_with_every_model(model_and_vocabularies, tmp_path):
    """A SavedModel of two models: it holds both models' weights, translates as `search_ids` does over the
    ensemble (in process and after a reload in a fresh process) and scores as `score_ids` does."""
    model, vocabularies = model_and_vocabularies
    other = Transformer(
        vocabularies.source.vocab_size, num_layers=2, hidden_dim=24, num_heads=2, intermediate_dim=32, max_length=20
    )
    rng = np.random.default_rng(7)  # not keras.utils.set_random_seed: it would delete the tokenizers' resources
    other.set_weights([rng.normal(0.0, 0.3, w.shape).astype(w.dtype) for w in other.get_weights()])
    ensemble = TranslatorModule([model, other], vocabularies, SearchSettings.of(beam_size=3, max_length_b=5))
    assert len(ensemble.model_variables) == len(model.variables) + len(other.variables)
    sentences = [SENTENCES[0], SENTENCES[3], "5 june 2001", "1 May 1990"]
    ids = vocabularies.source.tokenize(tf.constant(sentences))[:, :20].to_tensor()  # cut to the shorter max_length
    tokens, _ = search_ids([model, other], ids, SearchSettings.of(beam_size=3, max_length_b=5, max_length=20))
    expected = [t.decode() for t in vocabularies.target.detokenize(tokens).numpy()]
    assert texts(ensemble, sentences) == expected
    alone = TranslatorModule(model, vocabularies, SearchSettings.of(beam_size=3, max_length_b=5))
    assert texts(alone, sentences) != expected  # the second model counts
    targets = ["1996-03-05", "2031-06-01", "2001-06-05", "1990-05-01"]
    scored = ensemble.score(source=tf.constant(sentences), target=tf.constant(targets))["score"].numpy()
    forced, _ = score_ids([model, other], ids, vocabularies.target.tokenize(tf.constant(targets)).to_tensor())
    assert ids.shape[1] == 20 and np.isnan(scored[0])  # the first source is longer than the shorter max_length
    np.testing.assert_allclose(scored[1:], forced.numpy()[1:], atol=1e-4)
    export_translator(ensemble, tmp_path / "ensemble")
    translations, nbest_shape, nbest_first, _ = _reload_and_translate(tmp_path / "ensemble", sentences)
    assert translations == nbest_first == expected and nbest_shape == [4, 3]


def test_the_signatures_share_one_encoder_one_decoder_step_and_one_alignment(smoke_run):
    """`kmt.inference.translator.SharedGraphs`: the export stores each once, however many signatures call it."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel.FromString((smoke_run / "export" / "saved_model.pb").read_bytes())
    graph = saved_model.meta_graphs[0]
    names = [function.signature.name for function in graph.graph_def.library.function]
    for shared in ("encode", "decode_step", "alignment"):
        assert sum(name.startswith(f"__inference_{shared}_") for name in names) == 1, names
    assert {"translate", "translate_prefix", "translate_align", "align", "score"} <= set(graph.signature_def)
    # The decoder step writes its caches without XLA's dynamic-update-slice, which TensorFlow would compile for
    # each new cache shape (`kmt.layers.attention._write_rows`).
    ops = {node.op for function in graph.graph_def.library.function for node in function.node_def}
    assert not any(op.startswith("Xla") for op in ops), sorted(ops)


def test_the_export_holds_each_stateless_computation_once(smoke_run, tmp_path):
    """`kmt.inference.graph_merge`: duplicates are merged when the SavedModel is written, so merging again finds
    nothing."""
    shutil.copy(smoke_run / "export" / "saved_model.pb", tmp_path / "saved_model.pb")
    before, after = merge_duplicate_nodes(tmp_path)
    assert before == after > 1000


def test_merging_duplicate_nodes_keeps_what_a_function_computes(tmp_path):
    """Repeated slices and shapes become one node each; random ops, stateful, stay two draws."""
    from tensorflow.core.protobuf import saved_model_pb2

    class Module(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def f(self, x):
            first = x[:, 0] * tf.cast(tf.shape(x)[0], tf.float32) + x[:, 0] * tf.cast(tf.shape(x)[0], tf.float32)
            noise = tf.random.uniform([2]) - tf.random.uniform([2])
            return {"first": first, "second": x[:, 1] + 1.0, "noise": noise}

    tf.saved_model.save(Module(), str(tmp_path))

    def op_counts():
        graph = saved_model_pb2.SavedModel.FromString((tmp_path / "saved_model.pb").read_bytes()).meta_graphs[0]
        function = next(f for f in graph.graph_def.library.function if f.signature.name.startswith("__inference_f_"))
        ops = [node.op for node in function.node_def]
        return {op: ops.count(op) for op in ("StridedSlice", "Shape", "RandomUniform")}

    assert op_counts() == {"StridedSlice": 5, "Shape": 2, "RandomUniform": 2}
    before, after = merge_duplicate_nodes(tmp_path)
    assert after < before
    assert op_counts() == {"StridedSlice": 3, "Shape": 1, "RandomUniform": 2}
    x = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    outputs = tf.saved_model.load(str(tmp_path)).f(x)
    np.testing.assert_array_equal(outputs["first"].numpy(), [4.0, 16.0])
    np.testing.assert_array_equal(outputs["second"].numpy(), [3.0, 6.0])
    assert outputs["noise"].shape == (2,) and not np.all(outputs["noise"].numpy() == 0.0)
