"""CTranslate2 export: greedy search in CTranslate2 (float32) emits kmt's tokens, one for one, on a trained dates run,
a trained pre-norm Multi30k run and untrained models of every other shape kmt builds; kmt-translate on the CTranslate2
directory writes what it writes on the SavedModel; bad input stops in one line."""

import importlib.util
import os
import sys

import keras
import numpy as np
import pytest

from kmt.checkpoints import load_run_model
from kmt.cli import export as export_cli
from kmt.cli import translate as translate_cli
from kmt.data.dates import generate_date_pairs
from kmt.inference.ctranslate2 import CT2Translator, export_ctranslate2
from kmt.inference.decoding import search_ids
from kmt.inference.keras_translator import KerasTranslator
from kmt.inference.settings import SearchSettings
from kmt.models import Transformer
from kmt.special_ids import END_ID, PAD_ID, START_ID
from kmt.tokenizer import Vocabularies
from tests.helpers import refused, run_cli

# Only the optional third-party library may be missing (the `ctranslate2` extra); kmt's own module always imports.
needs_ctranslate2 = pytest.mark.skipif(
    importlib.util.find_spec("ctranslate2") is None,
    reason='needs ctranslate2, an optional dependency: pip install "kmt[ctranslate2]"',
)

DATES = [
    "Tuesday, March 5, 1996",
    "5 march 96",
    "12/31/1999",
    "the third of May 2001",
    "saturday april 13 2019",
    "1 1 1",
    "September 30, 1845, a Tuesday, and a longer sentence after it",
    "",
    "x" * 500,
]
SEARCH = SearchSettings.of(beam_size=1, length_penalty=0.6, max_length_a=1.5, max_length_b=10)


def kmt_search(model, rows, max_length_a, max_length_b, beam_size=1, length_penalty=0.0):
    """kmt's own search (what the SavedModel runs) on rows of ids: a list of id lists, end token and pad dropped,
    and the scores."""
    max_length = model.max_length
    rows = [row[:max_length] for row in rows]
    source = np.full((len(rows), max(1, *map(len, rows))), PAD_ID, np.int32)
    for i, row in enumerate(rows):
        source[i, : len(row)] = row
    settings = SearchSettings.of(
        beam_size=beam_size, length_penalty=length_penalty, max_length_a=max_length_a, max_length_b=max_length_b
    )
    tokens, scores = search_ids(model, source, settings)
    tokens, scores = keras.ops.convert_to_numpy(tokens), keras.ops.convert_to_numpy(scores)
    ids = [[int(t) for t in row if t not in (PAD_ID, END_ID)] for row in tokens]
    return [row if len(source_row) else [] for row, source_row in zip(ids, rows)], scores


def assert_same_greedy(model, vocabularies, sentences, directory, decode=SEARCH, check_scores=True):
    export_ctranslate2(model, vocabularies, decode, directory)
    rows = vocabularies.source.encode(sentences)
    expected, expected_scores = kmt_search(model, rows, decode.max_length_a, decode.max_length_b)
    translator = CT2Translator(directory, compute_type="float32")
    ids, scores = translator.search(rows, translator.settings.replace(beam_size=1))
    assert ids == expected  # token for token, every sentence stopped where kmt stops it
    assert sum(map(len, ids)) > len(ids)  # the model emitted tokens, not end tokens only
    if not check_scores:
        return ids
    nonempty = [i for i, row in enumerate(rows) if len(row)]
    np.testing.assert_allclose(np.array(scores)[nonempty], expected_scores[nonempty], rtol=1e-4, atol=1e-3)


@pytest.fixture(scope="module")
def multi30k_run(tmp_path_factory):
    """A pre-norm Multi30k run at smoke size (one epoch, no SavedModel)."""
    if not os.environ.get("KMT_DATA_DIR"):
        pytest.skip("needs the real corpora in $KMT_DATA_DIR")
    run_dir = tmp_path_factory.mktemp("multi30k") / "run"
    result = run_cli(
        "train",
        "debug=smoke",
        "data=multi30k",
        "data.download=false",
        "model.norm_first=true",
        "trainer.export=false",
        f"hydra.run.dir={run_dir}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


@needs_ctranslate2
@pytest.mark.e2e
def test_dates_run_greedy_is_kmts_token_for_token(smoke_run, tmp_path):
    cfg, vocabularies, model = load_run_model(smoke_run)
    assert not cfg.model.norm_first and cfg.model.shared_embeddings and cfg.model.tied_output
    assert_same_greedy(model, vocabularies, DATES, tmp_path / "ct2", SearchSettings.from_config(cfg.decode))
    # Beam search differs only in the length penalty's formula: with alpha 0 (none) the beams are kmt's too.
    rows = vocabularies.source.encode(DATES)
    expected, _ = kmt_search(model, rows, cfg.decode.max_length_a, cfg.decode.max_length_b, beam_size=3)
    translator = CT2Translator(tmp_path / "ct2")
    assert translator.search(rows, translator.settings.replace(beam_size=3, length_penalty=0.0))[0] == expected


@needs_ctranslate2
@pytest.mark.e2e
def test_multi30k_prenorm_run_greedy_is_kmts_token_for_token(multi30k_run, tmp_path):
    cfg, vocabularies, model = load_run_model(multi30k_run)
    assert cfg.model.norm_first
    with open(os.path.join(os.environ["KMT_DATA_DIR"], "multi30k", "val.en"), encoding="utf-8") as f:
        sentences = [next(f).strip() for _ in range(32)]
    assert_same_greedy(model, vocabularies, sentences, tmp_path / "ct2", SearchSettings.from_config(cfg.decode))


@needs_ctranslate2
@pytest.mark.parametrize(
    "shape",
    [
        dict(norm_first=True, tied_output=False),
        dict(shared_embeddings=False, tied_output=False, learned_positions=True, num_decoder_layers=2),
    ],
)
def test_other_model_shapes_convert(shape, tmp_path):
    """Untrained models (random weights) of the shapes the trained runs above do not have."""
    keras.utils.set_random_seed(1)
    pairs = generate_date_pairs(300, seed=0)
    joint = shape.get("shared_embeddings", True)
    vocabularies = Vocabularies.train([s for s, _ in pairs], [t for _, t in pairs], joint=joint, vocab_size=300)
    model = Transformer(
        vocabularies.source.vocab_size,
        target_vocab_size=vocabularies.target.vocab_size,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        max_length=24,
        **shape,
    )
    assert_same_greedy(model, vocabularies, DATES, tmp_path / "ct2")
    # Scoring given pairs: the log-probabilities kmt's `score_ids` gives, NaN where it gives NaN.
    targets = ["1996-03-05", "", "x", *DATES[3:]]
    expected = KerasTranslator(model, vocabularies).score(DATES, targets)
    scores = CT2Translator(tmp_path / "ct2", compute_type="float32").score(DATES, targets)
    assert [s.tokens for s in scores] == [s.tokens for s in expected]
    np.testing.assert_allclose(
        [s.log_probability for s in scores], [s.log_probability for s in expected], rtol=1e-4, atol=1e-3
    )
    names = set(os.listdir(tmp_path / "ct2"))
    assert (
        {"joint.model", "shared_vocabulary.json"}
        if joint
        else {"source.model", "target.model", "source_vocabulary.json", "target_vocabulary.json"}
    ) <= names


@needs_ctranslate2
def test_a_batch_split_among_one_thread_workers_gives_what_one_worker_gives(tmp_path, capsys):
    """By default a CT2Translator runs a one-thread worker per core and splits each batch among them; the parts'
    translations, scores and alignments are the whole batch's, in order, and `kmt-translate --threads` sets the
    workers."""
    keras.utils.set_random_seed(2)
    pairs = generate_date_pairs(300, seed=0)
    vocabularies = Vocabularies.train([s for s, _ in pairs], [t for _, t in pairs], joint=True, vocab_size=300)
    model = Transformer(
        vocabularies.source.vocab_size, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32, max_length=24
    )
    export_ctranslate2(model, vocabularies, SEARCH, tmp_path / "ct2")
    default = CT2Translator(tmp_path / "ct2", compute_type="float32")
    assert default.workers == len(os.sched_getaffinity(0)) == default.translator.num_translators
    one = CT2Translator(tmp_path / "ct2", compute_type="float32", inter_threads=1)
    three = CT2Translator(tmp_path / "ct2", compute_type="float32", inter_threads=3)
    assert (one.workers, three.workers, three.translator.num_translators) == (1, 3, 3)
    targets = ["1996-03-05", "", "x", *DATES[3:]]
    for settings in (SEARCH, SEARCH.replace(beam_size=3)):  # a sentence's float rounding may depend on its batch
        expected = [best for [best] in one.translate(DATES, settings=settings, nbest=1)]
        split = [best for [best] in three.translate(DATES, settings=settings, nbest=1)]
        assert [h.text for h in split] == [h.text for h in expected]
        np.testing.assert_allclose([h.score for h in split], [h.score for h in expected], rtol=1e-5)
    scores, expected = three.score(DATES, targets), one.score(DATES, targets)
    assert [s.tokens for s in scores] == [s.tokens for s in expected]
    np.testing.assert_allclose(
        [s.log_probability for s in scores], [s.log_probability for s in expected], rtol=1e-5, equal_nan=True
    )
    assert three.align(DATES, targets) == one.align(DATES, targets)
    source = tmp_path / "dates.txt"
    source.write_text("\n".join(DATES) + "\n", encoding="utf-8")
    for threads in ("1", "3"):
        translate_cli.main(
            [str(tmp_path / "ct2"), "--input", str(source), "--output", str(tmp_path / threads), "--threads", threads]
        )
    assert (tmp_path / "3").read_text(encoding="utf-8") == (tmp_path / "1").read_text(encoding="utf-8")
    assert len((tmp_path / "1").read_text(encoding="utf-8").splitlines()) == len(DATES)


@needs_ctranslate2
def test_marian_switches_export_as_kmt_decodes(tmp_path):
    """An untrained model with the switches an OPUS-MT import sets (swish, Marian's sinusoid halves, a bias on the
    tied projection): CTranslate2's greedy tokens and scores are kmt's."""
    keras.utils.set_random_seed(3)
    pairs = generate_date_pairs(300, seed=0)
    vocabularies = Vocabularies.train([s for s, _ in pairs], [t for _, t in pairs], joint=True, vocab_size=300)
    model = Transformer(
        vocabularies.source.vocab_size,
        num_layers=2,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        max_length=24,
        activation="swish",
        position_layout="halves",
        output_bias=True,
    )
    bias = np.random.default_rng(0).normal(scale=2.0, size=model.output_bias.bias.shape).astype("float32")
    model.output_bias.bias.assign(bias)
    assert_same_greedy(model, vocabularies, DATES, tmp_path / "ct2")


@needs_ctranslate2
@pytest.mark.parametrize("token_id", [PAD_ID, START_ID], ids=["pad", "start"])
def test_the_pad_and_start_tokens_are_never_emitted(token_id, tmp_path):
    """A model that favours pad (through its untied projection's bias) or start (through the tied projection's
    `output_bias`): kmt takes the next best token, and so does CTranslate2 (whose scores then leave that token's
    probability out of the normaliser, where kmt's keep it in)."""
    keras.utils.set_random_seed(2)
    pairs = generate_date_pairs(300, seed=0)
    vocabularies = Vocabularies.train([s for s, _ in pairs], [t for _, t in pairs], joint=True, vocab_size=300)
    model = Transformer(
        vocabularies.source.vocab_size,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        max_length=24,
        tied_output=token_id == START_ID,
        output_bias=token_id == START_ID,
    )
    bias = model.output_bias.bias if model.output_bias else model.output_projection.bias
    bias.assign(keras.ops.convert_to_numpy(bias) + 3.0 * (np.arange(bias.shape[0]) == token_id))
    export_ctranslate2(model, vocabularies, SEARCH, tmp_path / "ct2")
    rows = vocabularies.source.encode(DATES)
    source_pieces = vocabularies.source.pieces
    unsuppressed = CT2Translator(tmp_path / "ct2").translator.translate_batch(
        [[source_pieces[i] for i in row] for row in rows if len(row)],
        beam_size=1,
        min_decoding_length=0,
        max_input_length=24,
        max_decoding_length=24,
    )
    piece = vocabularies.target.pieces[token_id]
    assert any(piece in output.hypotheses[0] for output in unsuppressed)  # CTranslate2's first choice
    ids = assert_same_greedy(model, vocabularies, DATES, tmp_path / "ct2", check_scores=False)
    assert all(token_id not in row for row in ids)


@needs_ctranslate2
def test_kmt_translate_on_ctranslate2_writes_what_it_writes_on_the_saved_model(smoke_run, tmp_path, capsys):
    source = tmp_path / "dates.txt"
    source.write_text("\n".join(DATES) + "\n", encoding="utf-8")
    for quantization in (None, "int8"):
        export_cli.main(
            [
                str(smoke_run),
                "--format",
                "ctranslate2",
                "--output",
                str(tmp_path / f"ct2_{quantization}"),
                *(["--quantization", quantization] if quantization else []),
            ]
        )
    float32, int8 = (tmp_path / "ct2_None" / "model.bin").stat().st_size, (tmp_path / "ct2_int8" / "model.bin").stat()
    assert int8.st_size < 0.6 * float32
    outputs = {}
    for name, directory in [
        ("saved", smoke_run / "export"),
        ("ct2", tmp_path / "ct2_None"),
        ("int8", tmp_path / "ct2_int8"),
    ]:
        translate_cli.main([str(directory), "--input", str(source), "--output", str(tmp_path / name), "--scores"])
        outputs[name] = [line.split("\t") for line in (tmp_path / name).read_text(encoding="utf-8").splitlines()]
    assert len(outputs["ct2"]) == len(DATES) == len(outputs["int8"])
    for name in ("ct2", "int8"):  # a translation for each sentence but the empty one
        assert [bool(text.strip()) for _, text in outputs[name]] == [bool(line) for line in DATES], name
    assert [text for _, text in outputs["ct2"]] == [text for _, text in outputs["saved"]]
    np.testing.assert_allclose(
        [float(s) for s, _ in outputs["ct2"]], [float(s) for s, _ in outputs["saved"]], atol=2e-3
    )
    assert outputs["ct2"][DATES.index("")] == ["0.0000", ""]
    # A beam of 3 through the command line's override; CTranslate2's own length penalty, so no comparison.
    translate_cli.main(
        [str(tmp_path / "ct2_None"), "--input", str(source), "--output", str(tmp_path / "beam"), "--beam-size", "3"]
    )
    beam = (tmp_path / "beam").read_text(encoding="utf-8").split("\n")[:-1]
    assert [bool(text.strip()) for text in beam] == [bool(line) for line in DATES]
    code, line = refused(capsys, translate_cli.main, tmp_path / "ct2_None", "--compute-type", "int3")
    assert code == 2 and "CTranslate2 cannot load" in line and "'int3'" in line


@needs_ctranslate2
def test_bad_input_stops_in_one_line(smoke_run, tmp_path, capsys):
    code, line = refused(capsys, export_cli.main, tmp_path, "--format", "ctranslate2")
    assert code == 2 and "not a kmt run directory" in line
    code, line = refused(
        capsys,
        export_cli.main,
        smoke_run,
        "--format",
        "ctranslate2",
        "--quantization",
        "int4",
        "--output",
        tmp_path / "out",
    )
    assert code == 2 and "unknown quantization 'int4'" in line and not (tmp_path / "out").exists()
    code, line = refused(capsys, export_cli.main, smoke_run, "--format", "onnx")
    assert code == 2 and "unknown export format 'onnx'" in line
    code, line = refused(capsys, export_cli.main, smoke_run, "--quantization", "int8")
    assert code == 2 and "quantization is for format ctranslate2" in line
    code, line = refused(capsys, translate_cli.main, smoke_run / "export", "--beam-size", "4")
    assert code == 2 and "search settings are baked in" in line
    code, line = refused(capsys, translate_cli.main, tmp_path)  # neither a run, a SavedModel nor a CTranslate2 one
    assert code == 2 and "is not a kmt run directory (config.yaml), SavedModel export" in line


def test_without_ctranslate2_the_export_names_the_extra(smoke_run, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` raises ImportError
    code, line = refused(capsys, export_cli.main, smoke_run, "--format", "ctranslate2", "--output", tmp_path / "out")
    assert code == 2 and line == 'error: CTranslate2 is not installed: pip install "kmt[ctranslate2]"'
