"""`kmt-import` of MarianMT (OPUS-MT) checkpoints against transformers' `MarianMTModel` and `MarianTokenizer`, the
reference (.ci/run installs them): logits on a padded batch, greedy outputs and token ids agree, for a tied and an
untied output; the CTranslate2 export decodes as the SavedModel does; an imported model fine-tunes with kmt-train,
exports, translates and serves; what kmt cannot map is refused in one line, with nothing written."""

import copy
import json
import shutil

import numpy as np
import pytest

from tests.helpers import optional

optional("transformers", "pip install transformers torch (the reference implementation)")
torch = optional("torch", "pip install transformers torch (the reference implementation)")

from kmt.checkpoints import load_run_model  # noqa: E402
from kmt.inference.decoding import search_ids  # noqa: E402
from kmt.inference.settings import SearchSettings  # noqa: E402
from kmt.run_dir import RunDir  # noqa: E402
from kmt.special_ids import END_ID, PAD_ID, START_ID, UNK_ID  # noqa: E402
from kmt.tokenizer import Vocabularies  # noqa: E402
from tests.helpers import model_logits, run_cli  # noqa: E402
from tests.marian_checkpoint import SOURCES, TARGETS, make_checkpoint  # noqa: E402

# Punctuation, digits, accents, characters the SentencePiece models never saw, an empty line, extra spaces.
SAMPLE = [*SOURCES[:4], "naïve café — résumé ÁÉÍÓÚ ü!!!", "日本語 ☃ 42", "", "   espacios   alrededor  ", "3.14 12345"]
LIMIT = 16  # greedy outputs compared: random models seldom end, so this many tokens each


@pytest.fixture(scope="module", params=["tied", "untied"])
def imported(request, tmp_path_factory):
    """`(hf_model, checkpoint_dir, run_dir)`: a random MarianMT checkpoint and its import (in this process, as
    kmt-import's main does; the command itself runs in test_a_hub_id_that_cannot_be_downloaded... and the e2e
    fine-tuning test)."""
    from kmt.importers.marian import import_marian

    base = tmp_path_factory.mktemp(request.param)
    reference = make_checkpoint(base / "hf", tied=request.param == "tied")
    assert import_marian(str(base / "hf"), base / "run") == base / "run"
    return reference, base / "hf", base / "run"


def marian_tokenizer(checkpoint):
    from transformers import MarianTokenizer

    files = (checkpoint / name for name in ("source.spm", "target.spm", "vocab.json"))
    return MarianTokenizer(*map(str, files))


def kmt_ids(run):
    """Marian id -> kmt id (pad -> kmt's pad), from the run's import record."""
    order = json.loads((run / "import.json").read_text())["marian_id_of_kmt_id"]
    inverse = np.zeros(max(order) + 1, np.int64)
    for kmt_id in reversed(range(len(order))):  # the lowest kmt id of a Marian id: its pad is kmt's pad, not start
        inverse[order[kmt_id]] = kmt_id
    return np.array(order), inverse


def test_tokenization_gives_marian_tokenizers_ids(imported):
    _, checkpoint, run = imported
    tokenizer, (_, inverse) = marian_tokenizer(checkpoint), kmt_ids(run)
    vocabularies = Vocabularies.load(run / "tokenizer")
    expected = [inverse[ids].tolist() for ids in tokenizer(SAMPLE)["input_ids"]]  # each ends with </s>
    assert [row.tolist() for row in vocabularies.source.encode(SAMPLE)] == expected
    assert vocabularies.source.tokenize(SAMPLE).to_list() == expected  # the op the SavedModel runs
    assert expected[SAMPLE.index("")] == [END_ID] and UNK_ID in expected[SAMPLE.index("日本語 ☃ 42")]
    targets = tokenizer(text_target=TARGETS)["input_ids"]  # kmt's targets get their end token from the batcher
    assert [row.tolist() for row in vocabularies.target.encode(TARGETS)] == [inverse[t[:-1]].tolist() for t in targets]


def test_logits_agree_on_a_padded_batch(imported):
    reference, checkpoint, run = imported
    tokenizer, (_, inverse) = marian_tokenizer(checkpoint), kmt_ids(run)
    pad = reference.config.pad_token_id
    batch = tokenizer(SOURCES, text_target=TARGETS, padding=True, return_tensors="pt")
    decoder_in = torch.cat([torch.full((len(SOURCES), 1), pad), batch["labels"][:, :-1]], dim=1)
    with torch.no_grad():
        expected = reference(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=decoder_in
        ).logits.numpy()

    _, _, model = load_run_model(run)
    source = inverse[batch["input_ids"].numpy()]  # Marian's padding is its pad id: kmt's pad
    target_in = inverse[decoder_in.numpy()]
    target_in[:, 0] = START_ID  # Marian starts from its pad token; kmt from the start token that copies its row
    logits = model_logits(model, source, target_in)  # (B, T, V + 1)
    real = np.ones(target_in.shape, bool)
    real[:, 1:] = target_in[:, 1:] != PAD_ID  # the padded decoder positions are nobody's output
    assert real.sum() > 40 and (~real).sum() > 0
    np.testing.assert_allclose(logits[..., inverse][real], expected[real], atol=1e-4, rtol=0)


def test_greedy_outputs_equal_generate(imported):
    reference, checkpoint, run = imported
    tokenizer, (order, inverse) = marian_tokenizer(checkpoint), kmt_ids(run)
    batch = tokenizer(SOURCES, padding=True, return_tensors="pt")
    generation = copy.deepcopy(reference.generation_config)  # OPUS-MT's: pad never generated (bad_words_ids)
    generation.update(num_beams=1, do_sample=False, max_new_tokens=LIMIT, max_length=None, forced_eos_token_id=None)
    with torch.no_grad():
        generated = reference.generate(**batch, generation_config=generation)[:, 1:].numpy()  # no start token

    _, _, model = load_run_model(run)
    settings = SearchSettings.of(beam_size=1, max_length_a=0, max_length_b=LIMIT)
    tokens, _ = search_ids(model, inverse[batch["input_ids"].numpy()], settings)

    def until_end(row, end):
        row = list(row[: LIMIT - 1])
        return row[: row.index(end) + 1] if end in row else row

    eos = reference.config.eos_token_id
    expected = [until_end(row, eos) for row in generated.tolist()]
    assert [until_end(order[row].tolist(), eos) for row in np.asarray(tokens)] == expected
    assert sum(map(len, expected)) > 4 * len(SOURCES)  # long outputs: many steps agree, not just the first


@pytest.mark.e2e
def test_kmt_import_then_kmt_export_as_a_savedmodel_and_ctranslate2_give_the_same_greedy_outputs(imported, tmp_path):
    import kmt

    reference, checkpoint, _ = imported
    if not reference.config.tie_word_embeddings:
        pytest.skip("one output layout is enough for the exports")
    run = tmp_path / "run"
    result = run_cli("importer", checkpoint, "--output", run)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == f"imported {checkpoint} to {run}"
    for format_args in ((), ("--format", "ctranslate2")):
        result = run_cli("export", run, "--beam-size", "1", *format_args)
        assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in SAMPLE if line.strip()]
    saved_model = kmt.load(run / "export").translate(lines)
    assert kmt.load(run / "ctranslate2").translate(lines) == saved_model
    assert all(saved_model) and kmt.load(run / "export").translate([""]) == [""]
    # Terminology on the imported model: each translation holds its phrases (words of the reference translations).
    from kmt.errors import KmtError
    from kmt.inference.translators import met

    phrases = [[target.split()[0]] for target in TARGETS[:3]]
    constrained = kmt.load(run / "export").translate(SOURCES[:3], constraints=phrases, nbest=1)
    assert all(met(row, hypotheses[0]) for row, hypotheses in zip(phrases, constrained)), constrained
    with pytest.raises(KmtError, match="is a CTranslate2 directory, which cannot constrain a translation"):
        kmt.load(run / "ctranslate2").translate(SOURCES[:3], constraints=phrases)


@pytest.mark.e2e
def test_an_imported_model_fine_tunes_exports_translates_and_serves(imported, tmp_path):
    from tests.test_serve import Server

    reference, _, run = imported
    if not reference.config.tie_word_embeddings:
        pytest.skip("one output layout is enough for fine-tuning")
    for split, copies in (("train", 8), ("val", 1)):
        for side, lines in (("es", SOURCES), ("en", TARGETS)):
            (tmp_path / f"{split}.{side}").write_text("\n".join(lines * copies) + "\n", encoding="utf-8")
    tuned = tmp_path / "tuned"
    result = run_cli(
        "train",
        f"trainer.init_from={run}",
        "data=parallel",
        *(
            f"data.{split}.{side}={tmp_path / f'{split}.{lang}'}"
            for split in ("train", "val")
            for side, lang in (("source", "es"), ("target", "en"))
        ),
        "debug=smoke",
        f"hydra.run.dir={tuned}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    log = (tuned / "train.log").read_text()
    assert f"fine-tuning from {run / 'checkpoints' / 'epoch_000.weights.h5'}" in log and "Skipping" not in result.stderr
    model = RunDir(tuned).read_config().model  # the imported model's shape, not debug=smoke's
    assert (model.hidden_dim, model.activation, model.position_layout, model.dropout) == (64, "swish", "halves", 0.1)
    assert Vocabularies.load(tuned / "tokenizer").same_as(Vocabularies.load(run / "tokenizer"))

    translated = run_cli("translate", tuned / "export", input="\n".join(SOURCES[:3]) + "\n")
    assert translated.returncode == 0, translated.stderr[-3000:]
    assert len(translated.stdout.splitlines()) == 3
    server = Server(tuned / "export")
    try:
        status, _, body = server.post("/v1/models/kmt:predict", {"instances": SOURCES[:3]})
    finally:
        assert server.stop() == 0
    assert status == 200 and [row["translation"] for row in body["predictions"]] == translated.stdout.splitlines()


def test_what_kmt_cannot_map_is_refused_in_one_line_before_anything_is_written(imported, tmp_path):
    _, checkpoint, run = imported
    changed = shutil.copytree(checkpoint, tmp_path / "prenorm")
    config = json.loads((changed / "config.json").read_text())
    (changed / "config.json").write_text(json.dumps(config | {"normalize_before": True}))
    result = run_cli("importer", changed, "--output", tmp_path / "out")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "error: config.json: normalize_before=true is not supported (kmt needs false)"
    ]
    assert not (tmp_path / "out").exists()

    from kmt.importers.marian import CheckpointError, import_marian

    (changed / "config.json").write_text(json.dumps(config | {"model_type": "bart"}))
    with pytest.raises(CheckpointError, match="model_type='bart'; kmt imports MarianMT"):
        import_marian(str(changed), tmp_path / "out")
    with pytest.raises(CheckpointError, match="already exists"):
        import_marian(str(checkpoint), run)
    vocab = json.loads((checkpoint / "vocab.json").read_text())
    shutil.copy(checkpoint / "config.json", changed / "config.json")
    (changed / "vocab.json").write_text(json.dumps(vocab | {">>fra<<": len(vocab)}))
    with pytest.raises(CheckpointError, match="vocab.json"):
        import_marian(str(changed), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_pytorch_model_bin_imports_as_model_safetensors_does(imported, tmp_path):
    from kmt.importers.marian import import_marian

    reference, checkpoint, run = imported
    if not reference.config.tie_word_embeddings:
        pytest.skip("one output layout is enough for the weights' file format")
    legacy = shutil.copytree(checkpoint, tmp_path / "legacy", ignore=shutil.ignore_patterns("model.safetensors"))
    torch.save(reference.state_dict(), legacy / "pytorch_model.bin")  # older OPUS-MT uploads: read weights_only
    imported_again = import_marian(str(legacy), tmp_path / "run")
    weights = [load_run_model(path)[2].get_weights() for path in (run, imported_again)]
    assert all(np.array_equal(a, b) for a, b in zip(*weights))


def test_a_hub_id_that_cannot_be_downloaded_says_how_to_pass_a_directory(tmp_path):
    result = run_cli("importer", "Nobody/opus-mt-xx-yy", "--output", tmp_path / "run", env={"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: could not download Nobody/opus-mt-xx-yy from the Hugging Face hub (")
    assert line.endswith("(`hf download Nobody/opus-mt-xx-yy --local-dir DIR`) and pass DIR")
    assert not (tmp_path / "run").exists()
