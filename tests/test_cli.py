"""The console scripts on a real (smoke) run: kmt-translate, kmt-evaluate, kmt-export, kmt-score and the others.

Most tests call a script's `main([...])` in the test process. A fresh process runs once for each script (the
`run_cli` calls here; kmt-train's and kmt-prepare's are the `smoke_run` and `prepared_smoke` fixtures, kmt-serve's
is in test_serve.py) and where only a process shows the behaviour: a terminal, a reader that leaves, native logs.
"""

import json
import math
import os
import pty
import re
import select
import shutil
import subprocess
import sys

import pytest

from tests.helpers import compose_config, refused, run_cli, train_main


def _called(capsys, main, *args):
    """A console script's `main(args)` in the test process: `(exit status, stdout, stderr)`."""
    try:
        main([str(arg) for arg in args])
        status = 0
    except SystemExit as stopped:
        status = stopped.code
    out, err = capsys.readouterr()
    return status, out, err


def _translated(export, lines, *args, path=None):
    """kmt-translate's output lines for the input `lines`, from `main([...])` in the test process, reading and
    writing files (`path`.in and `path`.out) so that its stdin and stdout stay the test's."""
    from kmt.cli import translate

    source, output = path.with_suffix(".in"), path.with_suffix(".out")
    source.write_bytes("".join(f"{line}\n" for line in lines).encode())
    translate.main([str(export), "--input", str(source), "--output", str(output), *map(str, args)])
    return output.read_bytes().decode().split("\n")[:-1]


def test_translate_keeps_lines_aligned(smoke_run, tmp_path):
    lines = ["Tuesday, March 5, 1996", "", "   ", "5 june 2001", "z" * 10_000, "😀"] + ["1 May 1990"] * 100
    outputs = _translated(smoke_run / "export", lines, "--batch-size", "4", "--buffer-size", "7", path=tmp_path / "t")
    assert len(outputs) == len(lines)
    assert outputs[1] == "" and outputs[2] == ""
    assert len(set(outputs[6:])) == 1  # the same sentence gets the same translation in any batch and buffer


def test_translate_answers_each_line_at_a_terminal(smoke_run):
    """Interactive use: with stdin a terminal, each line's translation is written before the next line is typed."""
    primary, secondary = pty.openpty()
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}  # stdout is a pipe and stays block-buffered: kmt must flush
    process = subprocess.Popen(
        [sys.executable, "-m", "kmt.cli.translate", str(smoke_run / "export")],
        stdin=secondary,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(secondary)
    try:
        answers = []
        for sentence in (b"Tuesday, March 5, 1996", b"5 june 2001"):
            os.write(primary, sentence + b"\n")
            ready, _, _ = select.select([process.stdout], [], [], 120)
            assert ready, "no translation before the input ended"
            answers.append(process.stdout.readline())
        os.write(primary, b"\x04")  # Ctrl-D: end of input
        assert process.wait(timeout=60) == 0
        assert all(answer.endswith(b"\n") for answer in answers)
        assert process.stdout.read() == b""
        assert b"Ctrl-D ends" in process.stderr.read()
    finally:
        process.kill()
        os.close(primary)


def test_translate_stops_quietly_when_its_reader_leaves(smoke_run, tmp_path):
    (tmp_path / "in.txt").write_text("Tuesday, March 5, 1996\n" * 200)
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kmt.cli.translate",
            str(smoke_run / "export"),
            "--input",
            str(tmp_path / "in.txt"),
            "--buffer-size",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdout.readline().endswith(b"\n")
    process.stdout.close()  # `kmt-translate ... | head -1`
    assert process.wait(timeout=120) == 141
    assert b"Traceback" not in process.stderr.read()


def test_train_help_explains_groups_values_and_data_dir(monkeypatch, capsys):
    status, out, _ = train_main(monkeypatch, capsys, "--help")
    assert status == 0
    assert "Config groups (pick one with group=option):" in out
    assert "experiment: multi30k_de_en, multi30k_en_de" in out
    assert "\ndata: dates, multi30k, parallel, prepared, spa_eng, wmt14_en_de\n" in out  # options only
    assert "\nmodel: base, big, lstm, narrow, small, student, tiny\n" in out and "trainer: default\n" in out
    assert "  sampling_topk: 1" in out and "  init_from: ''" in out
    assert "Corpora are read from $KMT_DATA_DIR" in out


def test_translate_refuses_to_write_over_its_input(tmp_path, capsys):
    from kmt.cli import translate

    (tmp_path / "in.txt").write_text("Tuesday, March 5, 1996\n")
    status, line = refused(
        capsys, translate.main, tmp_path, "--input", tmp_path / "in.txt", "--output", tmp_path / "." / "in.txt"
    )
    assert status == 2 and "is the --input file" in line
    assert (tmp_path / "in.txt").read_text() == "Tuesday, March 5, 1996\n"


def test_translate_rejects_a_directory_that_is_not_an_export(tmp_path, capsys):
    from kmt.cli import translate

    status, _, err = _called(capsys, translate.main, tmp_path)
    assert status == 2
    assert err.strip().splitlines()[-1].startswith("error: ") and "saved_model.pb" in err


def test_evaluate_prints_sacrebleu_scores_with_signatures(smoke_run, tmp_path, capsys):
    from kmt.cli import evaluate

    source, reference = tmp_path / "test.src", tmp_path / "test.tgt"
    source.write_text("Tuesday, March 5, 1996\n5 june 2001\n")
    reference.write_text("1996-03-05\n2001-06-05\n")
    result = run_cli(  # kmt-evaluate's one run in a process of its own
        "evaluate",
        smoke_run / "export",
        "--source",
        source,
        "--reference",
        reference,
        "--tokenized-reference",
        reference,
        "--lang",
        "en",
        "--json",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    scores = json.loads(result.stdout.strip().splitlines()[-1])
    assert scores["sentences"] == 2 and 0 <= scores["bleu"] <= 100 and 0 <= scores["chrf"] <= 100
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed") and "tok:13a" in scores["bleu_signature"]
    assert "tok:none" in scores["tokenized_bleu_signature"]
    status, text, _ = _called(capsys, evaluate.main, smoke_run / "export", "--source", source, "--reference", reference)
    assert status == 0 and "BLEU = " in text and "chrF = " in text
    assert "hyp/ref length" in text and scores["length_ratio"] > 0


def test_evaluate_compares_systems_with_paired_bootstrap(smoke_run, tmp_path, capsys):
    from kmt.cli import evaluate
    from kmt.data.dates import generate_date_pairs

    pairs = generate_date_pairs(60, seed=7)
    source, reference, perfect = tmp_path / "test.src", tmp_path / "test.tgt", tmp_path / "perfect.txt"
    source.write_text("".join(f"{s}\n" for s, _ in pairs))
    reference.write_text("".join(f"{t}\n" for _, t in pairs))
    perfect.write_text(reference.read_text())
    files = ["--source", source, "--reference", reference]
    status, out, err = _called(capsys, evaluate.main, smoke_run / "export", *files, "--compare", perfect, "--json")
    assert status == 0, err[-2000:]
    scores = json.loads(out.strip().splitlines()[-1])
    baseline, best = scores["compare"][str(smoke_run / "export")], scores["compare"][str(perfect)]
    assert baseline["bleu"]["score"] == pytest.approx(scores["bleu"]) and baseline["bleu"]["p"] is None
    assert best["bleu"]["score"] == pytest.approx(100.0) and best["chrf"]["p"] < 0.01
    assert "bs:1000" in scores["compare_signatures"]["bleu"]
    short = tmp_path / "short.txt"
    short.write_text("1996-03-05\n")
    status, line = refused(capsys, evaluate.main, smoke_run / "export", *files, "--compare", short)
    assert (status, line) == (2, f"error: {short} has 1 lines but {source} has 60")


def test_evaluate_tokenizes_references_that_have_no_tokenized_copy(smoke_run, tmp_path, capsys):
    from kmt.cli import evaluate

    source, reference = tmp_path / "test.source.txt", tmp_path / "test.target.txt"
    source.write_text("Tuesday, March 5, 1996\n5 june 2001\n")
    reference.write_text("A Dog, Running.\nDon't stop: it's 5 o'clock!\n")
    files = [smoke_run / "export", "--source", source, "--reference", reference, "--tokenize-reference"]
    status, line = refused(capsys, evaluate.main, *files)
    assert status == 2 and line.startswith("error: cannot tell the target language") and "--lang" in line
    status, out, err = _called(capsys, evaluate.main, *files, "--lang", "en", "--compare", reference, "--json")
    assert status == 0, err[-2000:]
    scores = json.loads(out.strip().splitlines()[-1])
    assert "tok:none" in scores["tokenized_bleu_signature"] and scores["tokenized_bleu"] < 50
    # The reference itself, lowercased and tokenized as the references were, matches them exactly.
    assert scores["compare"][str(reference)]["tokenized_bleu"]["score"] == pytest.approx(100.0)


def test_evaluate_needs_the_target_language_for_tokenized_bleu(tmp_path, capsys):
    from kmt.cli import evaluate

    for name in ("test.source.txt", "test.target.txt", "test.lc.tok.txt"):
        (tmp_path / name).write_text("I don't know.\n")
    files = ["--source", tmp_path / "test.source.txt", "--reference", tmp_path / "test.target.txt"]
    status, line = refused(
        capsys, evaluate.main, tmp_path / "no_export", *files, "--tokenized-reference", tmp_path / "test.lc.tok.txt"
    )
    assert status == 2 and line.startswith("error: cannot tell the target language") and "--lang" in line
    args = evaluate.parse_args(
        [str(tmp_path / "e"), "--source", "a.es", "--reference", "b.txt", "--tokenized-reference", "tok/b.lc.tok.en"]
    )
    assert evaluate.moses_language(args) == "en"
    args.reference, args.lang = "test_2016_flickr.de", None
    assert evaluate.moses_language(args) == "de"
    args.lang = "cs"
    assert evaluate.moses_language(args) == "cs"
    status, line = refused(
        capsys, evaluate.main, tmp_path / "no_export", *files, "--tokenize-reference", "--lang", "english"
    )
    assert status == 2 and line.startswith("error: --lang english: Moses has no tokenization rules") and " en," in line


def test_evaluate_rejects_mismatched_files(smoke_run, tmp_path, capsys):
    from kmt.cli import evaluate

    (tmp_path / "a").write_text("one\ntwo\n")
    (tmp_path / "b").write_text("eins\n")
    status, line = refused(
        capsys, evaluate.main, smoke_run / "export", "--source", tmp_path / "a", "--reference", tmp_path / "b"
    )
    assert status == 2 and "has 2 lines but" in line


@pytest.mark.e2e
def test_export_rebuilds_from_a_checkpoint(smoke_run, tmp_path, capsys):
    from kmt.cli import export, translate

    status, out, err = _called(
        capsys,
        export.main,
        smoke_run,
        *("--checkpoint", "best", "--output", tmp_path / "best", "--beam-size", "2"),
        *("--max-length-a", "0", "--max-length-b", "4"),  # at most 4 tokens, the end token's included
    )
    assert status == 0, err[-2000:]
    assert out.splitlines()[-1] == f"exported best to {tmp_path / 'best'}"
    assert (tmp_path / "best" / "saved_model.pb").exists()
    translated = run_cli(  # kmt-translate as a user runs it: its stdout, and its stderr at kmt's native log level
        "translate", tmp_path / "best", "--nbest", "2", "--scores", input="Tuesday, March 5, 1996\n\n", native_logs=True
    )
    assert translated.returncode == 0, translated.stderr[-2000:]
    assert translated.stderr == ""  # at kmt's log level beam search logs nothing (it once made oneDNN log an error)
    nbest = [line.split("\t") for line in translated.stdout.splitlines()]  # 2 lines per input line, best first
    assert len(nbest) == 4 and nbest[2:] == [["0.0000", ""], ["0.0000", ""]]
    assert float(nbest[0][0]) >= float(nbest[1][0]) and nbest[0][1] != nbest[1][1]
    [unlimited] = _translated(smoke_run / "export", ["Tuesday, March 5, 1996"], path=tmp_path / "unlimited")
    assert max(len(nbest[0][1]), len(nbest[1][1])) < len(unlimited)  # cut short by --max-length-b
    assert refused(capsys, translate.main, tmp_path / "best", "--nbest", "3") == (
        2,
        "error: nbest 3 is more than the 2 hypotheses of the export's beam; export the run with "
        "`kmt-export RUN_DIR --beam-size 3`",
    )
    status, line = refused(capsys, export.main, smoke_run, "--checkpoint", tmp_path / "nope.weights.h5")
    assert status == 2 and "no checkpoint at" in line
    status, line = refused(capsys, export.main, smoke_run, "--average", "9")
    assert status == 2 and "needs 9 epoch checkpoints" in line


@pytest.mark.e2e
def test_export_ensembles_runs_that_share_a_vocabulary(smoke_run, tmp_path, capsys):
    from omegaconf import OmegaConf

    from kmt.cli import export
    from kmt.data.prepared import prepare_data
    from kmt.tokenizer import Vocabularies, train_tokenizer

    # A run's vocabulary is its data's, whatever its seed: runs trained on the same data share it.
    cfg = compose_config("seed=2")
    prepare_data(cfg.data, cfg.model, tmp_path / "data", OmegaConf.to_yaml(cfg)).vocabularies.save(tmp_path / "vocab")
    assert (tmp_path / "vocab" / "joint.model").read_bytes() == (smoke_run / "tokenizer" / "joint.model").read_bytes()
    other = shutil.copytree(smoke_run, tmp_path / "other", ignore=shutil.ignore_patterns("export"))
    (other / "checkpoints" / "epoch_002.weights.h5").unlink()  # its last is epoch 1: the same vocabulary, other weights
    result = run_cli("export", smoke_run, "--ensemble", other, "--output", tmp_path / "ensemble")  # kmt-export's run
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == f"exported {smoke_run}:last + {other}:last to {tmp_path / 'ensemble'}"
    lines = ["Tuesday, March 5, 1996", "5 june 2001", ""]
    ensemble, single = (
        _translated(path, lines, "--scores", path=tmp_path / name)
        for name, path in (("ensemble", tmp_path / "ensemble"), ("single", smoke_run / "export"))
    )
    assert len(ensemble) == 3 and ensemble[2] == "0.0000\t"
    assert ensemble != single  # both runs' models decode (the smoke run's export is greedy too)

    stranger = shutil.copytree(other, tmp_path / "stranger")
    tokenizer = train_tokenizer(["a vocabulary of other words", "trained on other text"], vocab_size=40)
    Vocabularies(tokenizer, tokenizer).save(stranger / "tokenizer")
    assert refused(capsys, export.main, smoke_run, "--ensemble", other, stranger, "--output", tmp_path / "no") == (
        2,
        f"error: ensemble: {stranger} has another vocabulary than {smoke_run}; an ensemble's runs must share one "
        "(train them on the same data with the same data.tokenizer settings)",
    )
    weights_file = smoke_run / "checkpoints" / "best.weights.h5"
    status, line = refused(capsys, export.main, smoke_run, "--ensemble", other, "--checkpoint", weights_file)
    assert status == 2 and "an ensemble loads every run at checkpoint last or best" in line
    assert not (tmp_path / "no").exists()


def test_export_averages_and_samples_for_back_translation_into_the_runs_export(smoke_run, tmp_path, capsys):
    from kmt.cli import export

    both = refused(
        capsys,
        export.main,
        smoke_run,
        "--sampling-topk",
        "0",
        "--beam-size",
        "4",
        "--average",
        "2",
        "--output",
        tmp_path / "no",
    )
    assert both == (2, "error: sampling_topk samples with beam_size=1 only. Received: sampling_topk=0, beam_size=4")
    assert not (smoke_run / "checkpoints" / "average_last2.weights.h5").exists()  # refused before any work
    # --average writes its checkpoint into the run: a copy, since other workers read smoke_run meanwhile. Without
    # --output, the export is the run's own export/.
    run = shutil.copytree(smoke_run, tmp_path / "run", ignore=shutil.ignore_patterns("export"))
    sampling = ["--sampling-topk", "0", "--sampling-temperature", "1.5", "--sampling-topp", "0.95"]
    status, out, err = _called(capsys, export.main, run, "--average", "2", *sampling)
    assert status == 0, err[-2000:]
    assert out.splitlines()[-1] == f"exported the average of the last 2 epochs to {run / 'export'}"
    assert (run / "checkpoints" / "average_last2.weights.h5").exists()
    assert (run / "export" / "saved_model.pb").is_file()
    translated = _translated(run / "export", ["Tuesday, March 5, 1996"] * 20, path=tmp_path / "sampled")
    assert len(set(translated)) > 1  # 20 draws from an undertrained model's distribution


def test_a_run_saved_before_an_option_existed_gets_its_default(smoke_run, tmp_path):
    from omegaconf import OmegaConf
    from omegaconf.errors import ValidationError

    from kmt.checkpoints import load_run_model

    run = shutil.copytree(smoke_run, tmp_path / "run", ignore=shutil.ignore_patterns("export"))
    old = OmegaConf.load(run / "config.yaml")
    old.decode = {k: v for k, v in old.decode.items() if not k.startswith("sampling_")}
    old.model = {k: v for k, v in old.model.items() if not k.endswith("word_dropout")}
    OmegaConf.save(old, run / "config.yaml")
    cfg, _, model = load_run_model(run)
    assert (cfg.decode.sampling_topk, cfg.decode.sampling_temperature, cfg.decode.sampling_topp) == (1, 1.0, 1.0)
    assert (cfg.model.source_word_dropout, cfg.model.target_word_dropout) == (0.0, 0.0)
    assert "source_word_dropout" not in [layer.name for layer in model.layers]
    assert cfg.decode.beam_size == old.decode.beam_size
    with pytest.raises(ValidationError):
        cfg.decode.sampling_topk = "many"  # overrides of a loaded run are type-checked against the schema


def test_translate_saves_cross_attention_heatmaps(smoke_run, tmp_path):
    lines = ["Tuesday, March 5, 1996", "", "the 3rd of june 2031"]
    assert (
        len(_translated(smoke_run / "export", lines, "--attention-plots", tmp_path / "plots", path=tmp_path / "t")) == 3
    )
    plots = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert plots == ["attention_0.png", "attention_2.png"]  # the empty line has nothing to plot
    assert (tmp_path / "plots" / "attention_0.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_saved_model_cli_run_translates(smoke_run):
    result = run_cli(
        "saved_model_cli",
        "run",
        "--dir",
        smoke_run / "export",
        "--tag_set",
        "serve",
        "--signature_def",
        "translate",
        "--input_exprs",
        'text=["Tuesday, March 5, 1996", ""]',
    )
    assert result.returncode == 0, result.stderr[-2000:]
    output = result.stdout.split("Result for output key translation:")[1].strip().splitlines()[0]
    assert output.startswith("[b'") and output.endswith("b'']")  # one translation, then the empty input's


def test_score_writes_log_probabilities_and_perplexity(smoke_run, tmp_path, capsys):
    from kmt.cli import score

    source, target = tmp_path / "source.txt", tmp_path / "target.txt"
    source.write_text("Tuesday, March 5, 1996\n5 june 2001\n\n1 May 1990\n" + "z" * 3000 + "\n1 May 1990\n")
    target.write_text("1996-03-05\n2001-06-05\n2000-01-01\n1990-05-01\n1990-01-01\n\n")
    total = run_cli("score", smoke_run / "export", "--source", source, "--target", target)  # kmt-score's run
    per_token = _called(
        capsys,
        score.main,
        smoke_run / "export",
        "--source",
        source,
        "--target",
        target,
        "--per-token",
        "--output",
        tmp_path / "scores.txt",
    )
    for status, stderr in ((total.returncode, total.stderr), (per_token[0], per_token[2])):
        # lines 3 (empty source) and 5 (over-long) are not scored: exit 1, one line
        assert status == 1, stderr[-2000:]
        error = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert error == [
            "error: 2 of 6 pairs were not scored, their lines read nan: an empty source (lines 3); a "
            "side longer than the model's maximum length (lines 5); the other scores were written"
        ]
    sums = [float(line) for line in total.stdout.splitlines()]
    means = [float(line) for line in (tmp_path / "scores.txt").read_text().splitlines()]
    assert len(sums) == len(means) == 6 and math.isnan(sums[2]) and math.isnan(sums[4]) and math.isnan(means[4])
    scored = [0, 1, 3, 5]
    assert all(sums[i] < 0 for i in scored) and sums[3] != sums[1]
    lengths = [round(sums[i] / means[i]) for i in scored]  # tokens: the target's and the end token
    assert lengths[3] == 1 and all(n > 1 for n in lengths[:3])  # the empty target is scored: its end token
    ppl = math.exp(-sum(sums[i] for i in scored) / sum(lengths))
    summary = re.search(r"scored 4 pairs, (\d+) tokens: (\S+) per token, perplexity (\S+)", total.stderr)
    assert summary and int(summary[1]) == sum(lengths) and float(summary[3]) == pytest.approx(ppl, abs=0.01)
    (tmp_path / "one.src").write_text("Tuesday, March 5, 1996\n")
    (tmp_path / "one.tgt").write_text("1996-03-05\n")
    one = ["--source", tmp_path / "one.src", "--target", tmp_path / "one.tgt", "--output", tmp_path / "one.txt"]
    status, _, err = _called(capsys, score.main, smoke_run / "export", *one)  # a file: main closes what it writes
    assert status == 0, err[-2000:]
    assert float((tmp_path / "one.txt").read_text()) == pytest.approx(sums[0], abs=1e-3)  # batch-independent
    status, _, err = _called(
        capsys, score.main, smoke_run / "export", "--source", source, "--target", tmp_path / "one.tgt"
    )
    assert status == 2 and err.count("\n") == 1 and "lines" in err


def test_plot_draws_a_runs_curves(smoke_run, tmp_path):
    result = run_cli("plot", smoke_run, "--output", tmp_path / "curves.png")  # kmt-plot's run
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == str(tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_import_refuses_a_missing_checkpoint_in_one_line(tmp_path):
    # kmt-import's run (importing a MarianMT checkpoint end to end: test_marian.py)
    result = run_cli("importer", tmp_path / "nope", "--output", tmp_path / "run")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'nope'}: no such checkpoint directory (pass a directory or a hub id like OWNER/NAME)"
    )
    assert not (tmp_path / "run").exists()


def _console_scripts():
    """`{name: module}` of every console script pyproject.toml installs."""
    import tomllib
    from pathlib import Path

    scripts = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]["scripts"]
    return {name: target.split(":") for name, target in scripts.items()}


def test_every_console_script_ends_quietly_when_its_reader_stops_early():
    import importlib

    from kmt.cli import console_script

    for module, function in _console_scripts().values():
        main = getattr(importlib.import_module(module), function)
        assert main.__code__ is console_script(print).__code__, module  # the wrapper the test below runs


@pytest.mark.parametrize("script", ["kmt-train", "kmt-serve", "kmt-saved-model-cli"])  # Hydra's, argparse's, absl's
def test_a_reader_that_stops_early_ends_a_console_script_quietly(script):
    # `kmt-train --help | head`: the reader has closed the pipe by the time the help is written. stdout buffered, as
    # a user's is (unbuffered, argparse drops the failed write itself).
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run(
            [sys.executable, "-m", _console_scripts()[script][0], "--help"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env=env | {"TF_CPP_MIN_LOG_LEVEL": "3"},
        )
    finally:
        os.close(write)
    assert result.returncode == 1 and result.stderr == "", result.stderr[-2000:]


def test_translate_takes_a_run_directory(smoke_run, tmp_path):
    lines = ["Tuesday, March 5, 1996", "5 june 2001", ""]
    from_run, from_export = (
        _translated(path, lines, "--scores", path=tmp_path / name)
        for name, path in (("run", smoke_run), ("export", smoke_run / "export"))
    )
    texts = [line.split("\t", 1)[1] for line in from_run]
    assert texts == [line.split("\t", 1)[1] for line in from_export] and texts[0]
    beam = _translated(smoke_run, lines, "--beam-size", "2", path=tmp_path / "beam")  # a run searches as asked
    assert len(beam) == 3


def test_translate_steers_from_prefixes_and_aligns_and_kmt_align_forces_pairs(smoke_run, tmp_path, capsys):
    from kmt.cli import align, translate

    lines = ["Tuesday, March 5, 1996", "", "5 june 2001", "1 May 1990"]
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("19\n\n\n2001-\n")
    outputs = _translated(smoke_run / "export", lines, "--prefixes", prefixes, "--alignments", path=tmp_path / "t")
    rows = [line.split(" ||| ") for line in outputs]
    assert len(rows) == 4 and all(len(row) == 2 for row in rows)  # `translation ||| i-j ...` on every line
    assert rows[0][0].startswith("19") and rows[3][0].startswith("2001-") and rows[1] == ["", ""]
    assert rows[2][0] == _translated(smoke_run / "export", [lines[2]], path=tmp_path / "plain")[0]  # no prefix
    for line, (text, links) in zip(lines, rows):
        pairs = [tuple(map(int, link.split("-"))) for link in links.split()]
        assert all(0 <= i < len(line.split()) and 0 <= j < len(text.split()) for i, j in pairs)

    (tmp_path / "src").write_text("".join(f"{line}\n" for line in lines))
    (tmp_path / "tgt").write_text("".join(f"{text}\n" for text, _ in rows))
    status, out, _ = _called(capsys, align.main, smoke_run, "--source", tmp_path / "src", "--target", tmp_path / "tgt")
    assert status == 0 and out.splitlines() == [links for _, links in rows]  # a translation's own alignment

    (tmp_path / "short").write_text("19\n")
    status, line = refused(
        capsys,
        translate.main,
        smoke_run / "export",
        "--input",
        tmp_path / "src",
        "--output",
        tmp_path / "out",
        "--prefixes",
        tmp_path / "short",
    )
    assert (status, line) == (
        2,
        "error: the prefixes end at line 1, before the input does: give one prefix a line (an empty line for none)",
    )
    status, line = refused(capsys, align.main, smoke_run, "--source", tmp_path / "src", "--target", tmp_path / "short")
    assert status == 2 and line == (
        f"error: --target {tmp_path / 'short'} has 1 lines and --source {tmp_path / 'src'} 4: "
        "give one translation a source line"
    )


def test_kmt_align_refuses_a_missing_file_in_one_line_in_a_process_of_its_own(smoke_run, tmp_path):
    result = run_cli("align", smoke_run / "export", "--source", tmp_path / "none", "--target", tmp_path / "none")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: cannot read {tmp_path / 'none'}: No such file or directory"]
