"""The terminology transform (`data.terminology`, `kmt.data.terminology`): training sources annotated with the target
terms their targets use, a vocabulary that keeps the markers whole, and translators that take a glossary inline."""

import json
import logging
import re

import pytest

from kmt.data.terminology import TermAnnotator
from kmt.inference.glossary import MARKERS, Glossary

MONTHS = "March\t03\nMay\t05\nJuly\t07\n"


def test_a_term_is_annotated_where_the_target_translates_it_so_and_counted():
    glossary = Glossary([("dog", "Hund"), ("hot dog", "Hotdog"), ("cat", "Katze")])
    annotator = TermAnnotator(glossary, ratio=1.0, seed=1)
    pairs = [
        ("A dog and a cat.", "Ein Hund und eine Katze."),
        ("A dog.", "Ein Köter."),  # the target says it otherwise: not a lesson in the term
        ("A hot dog.", "Ein Hotdog."),
        ("Dogs.", "Hunde."),  # not the whole word
    ]
    assert list(annotator(pairs)) == [
        (
            "A ｟src_term_start｠ dog ｟tgt_term_start｠ Hund ｟tgt_term_end｠ and a "
            "｟src_term_start｠ cat ｟tgt_term_start｠ Katze ｟tgt_term_end｠.",
            "Ein Hund und eine Katze.",
        ),
        ("A dog.", "Ein Köter."),
        ("A ｟src_term_start｠ hot dog ｟tgt_term_start｠ Hotdog ｟tgt_term_end｠.", "Ein Hotdog."),
        ("Dogs.", "Hunde."),
    ]
    assert (annotator.pairs, annotator.annotated_pairs, annotator.terms) == (4, 2, 3)
    assert glossary.annotate("A dog and a cat.") == TermAnnotator(glossary, 1.0, 1).annotate(*pairs[0])

    # ratio: each occurrence drawn, the same draws for the same seed
    many = [("A dog.", "Ein Hund.")] * 400
    drawn = [list(TermAnnotator(glossary, ratio=0.25, seed=seed)(many)) for seed in (7, 7, 8)]
    marked = [sum(MARKERS[0] in source for source, _ in pairs) for pairs in drawn]
    assert drawn[0] == drawn[1] != drawn[2] and all(60 < count < 140 for count in marked), marked


def test_a_vocabulary_trained_with_the_markers_keeps_each_whole():
    from kmt.tokenizer import train_tokenizer

    text = ["a dog barks at the cat", "the cat sleeps on a mat"] * 50
    with_markers = train_tokenizer(text, 300, user_defined_symbols=MARKERS)
    assert with_markers.holds(MARKERS) and not train_tokenizer(text, 300).holds(MARKERS)
    pieces = with_markers._processor.encode(Glossary({"dog": "Hund"}).annotate("a dog barks"), out_type=str)
    assert all(marker in pieces for marker in MARKERS)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.terminology.ratio=0"], "data.terminology.ratio must be in (0, 1]. Received: 0"),
        (
            ["data=prepared", "data.path=somewhere"],
            "data=prepared trains on the terms annotated as it was prepared: give the glossary to kmt-prepare",
        ),
        (
            ["data.train.alignments=train.fwd"],
            "the terminology transform adds words to the sources, which data.train.alignments's links do not count",
        ),
    ],
)
def test_settings_the_transform_cannot_take_are_one_line_each(overrides, message):
    from kmt.config.validation import validate
    from kmt.errors import ConfigError
    from tests.helpers import compose_config

    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        validate(compose_config("data.terminology.glossary=terms.tsv", *overrides))


def test_kmt_train_stops_at_a_glossary_it_cannot_read_with_one_line(monkeypatch, capsys, tmp_path):
    from tests.helpers import train_main

    terms = tmp_path / "terms.tsv"
    terms.write_text("March\t03\nMay 05\n")
    status, _, stderr = train_main(
        monkeypatch, capsys, "debug=smoke", f"data.terminology.glossary={terms}", f"hydra.run.dir={tmp_path / 'run'}"
    )
    assert status == 2 and stderr.strip().splitlines()[-1] == (
        f"error: {terms}:2: a glossary line is 'source term<TAB>target term'. Received: 'May 05'"
    )


@pytest.mark.e2e
def test_kmt_train_with_a_glossary_annotates_its_pairs_and_every_translator_takes_the_terms_inline(
    tmp_path, monkeypatch, capsys, caplog
):
    """kmt-train through to the export with `data.terminology.glossary`, then the glossary given to the SavedModel
    (kmt-translate, Python, kmt-serve) and to a CTranslate2 directory, which could not take it as constraints."""
    from kmt.cli import export, translate
    from kmt.data.shards import PreparedData
    from kmt.inference.loading import load_translator
    from tests.helpers import train_main
    from tests.test_bench import run_bench
    from tests.test_serve import Server

    terms = tmp_path / "months.tsv"
    terms.write_text(MONTHS)
    run = tmp_path / "run"
    caplog.set_level(logging.INFO, logger="kmt.data.terminology")
    status, _, _ = train_main(
        monkeypatch,
        capsys,
        "debug=smoke",
        "trainer.epochs=1",
        f"data.terminology.glossary={terms}",
        "data.terminology.ratio=1",
        f"hydra.run.dir={run}",
    )
    assert status == 0 and (run / "export" / "saved_model.pb").is_file()
    glossary = Glossary.load(terms)
    text = PreparedData(run / "data").split("train").text()
    pairs = [(text.source[i], text.target[i]) for i in text.kept]
    annotated = [(source, target) for source, target in pairs if MARKERS[0] in source]
    assert annotated and len(annotated) < len(pairs)
    for source, target in pairs:  # ratio 1: every pair whose target uses a term's translation is annotated
        if MARKERS[0] not in source:
            assert not any(re.search(rf"(?<!\w){re.escape(t)}(?!\w)", target) for t in glossary.constraints(source))
    for source, target in annotated:  # each annotation's target term is in the pair's target
        for term in source.split(MARKERS[1])[1:]:
            assert term.split(MARKERS[2])[0].strip() in target
    assert all(MARKERS[0] not in line for line in PreparedData(run / "data").split("val").text().source)
    assert f"terminology: annotated {len(annotated)} terms of {terms} in {len(annotated)} of 300" in caplog.text

    sentences = ["5 May 1999", "July 4, 2021", "9/9/99"]
    saved_model = load_translator(run / "export")
    assert saved_model.inline_terms and load_translator(run).inline_terms
    inline = saved_model.translate([glossary.annotate(line) for line in sentences])
    assert saved_model.translate(sentences, glossary=glossary) == inline
    source, out = tmp_path / "src.txt", tmp_path / "out.txt"
    source.write_text("".join(f"{line}\n" for line in sentences))
    translate.main([str(run / "export"), "--glossary", str(terms), "--input", str(source), "--output", str(out)])
    assert out.read_text().splitlines() == inline

    export.main([str(run), "--format", "ctranslate2"])  # CTranslate2 cannot constrain, but takes the terms inline
    translate.main([str(run / "ctranslate2"), "--glossary", str(terms), "--input", str(source), "--output", str(out)])
    ct2 = load_translator(run / "ctranslate2")
    assert ct2.inline_terms and out.read_text().splitlines() == ct2.translate([glossary.annotate(s) for s in sentences])

    running = Server(run / "ctranslate2", "--glossary", terms)
    try:
        status, _, body = running.post("/translate", {"text": sentences})
        assert status == 200 and body["translations"] == out.read_text().splitlines()
    finally:
        assert running.stop() == 0

    # The bench: a glossary from word links, then constrained decoding against inline terms (the export as both)
    (tmp_path / "tgt.txt").write_text("5 Mai 1999\nJuli 4, 2021\n9 9 99\n")
    (tmp_path / "links").write_text("1-1\n0-0\n\n")  # May-Mai, July-Juli
    common = ["--source", source, "--target", tmp_path / "tgt.txt"]
    result = run_bench(
        "terminology",
        "glossary",
        *common,
        "--alignments",
        tmp_path / "links",
        "--out",
        tmp_path / "derived.tsv",
        "--min-count",
        "1",
        "--skip",
        "0",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "derived.tsv").read_text() == "May\tMai\nJuly\tJuli\n"
    result = run_bench(
        "terminology",
        "compare",
        run / "export",
        run / "export",
        "--glossary",
        tmp_path / "derived.tsv",
        *common,
        "--batch-size",
        "2",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout.splitlines()[-1])
    assert (figures["terms"], figures["sentences_with_terms"]) == (2, 2)
    rows = {row["system"]: row for row in figures["rows"]}
    assert set(rows) == {"plain", "plain + constraints", "terms inline"}
    assert all(0 <= row["term_usage"] <= 100 and 0 <= row["bleu"] <= 100 for row in rows.values())
