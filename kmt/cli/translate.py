"""`kmt-translate EXPORT_DIR`: translate sentences from stdin (one per line) to stdout (one per line).

Output line i always translates input line i (with --nbest N, lines N*i to N*i + N - 1 do): empty and
whitespace-only lines give empty lines, over-long lines are truncated to the model's maximum length. With --prefixes
FILE, translation i begins with line i of FILE (autocompletion, forced starts); with --alignments each line ends in
its word alignment, Marian's layout: `translation ||| 0-0 1-2 ...` (source word i - target word j, from 0, over
whitespace-separated words). With --constraints FILE, FILE is the input in fairseq's layout, each sentence followed
by the target phrases its translation must contain, tab-separated (lexically constrained beam search); the
translations that could not contain them all are counted on stderr, with their lines. --glossary TSV adds, for
every source term (whole words, its case) found in a line, its target term to the line's constraints; a model trained
with the terminology transform (data.terminology) takes the terms inline instead, with no constrained search, so
CTranslate2 directories take them too. A SavedModel's
search settings (beam size, length penalty) are those it was exported with (`kmt-export RUN_DIR --beam-size N` to
change them).

Input is read --buffer-size lines at a time, translated in batches of similar length and written out before the
next lines are read, so large files stream and output appears as it is done. At a terminal every line is
translated as soon as it is entered (Ctrl-D ends the session).

EXPORT_DIR may also be a CTranslate2 directory (`kmt-export RUN_DIR --format ctranslate2`), decoded by CTranslate2
instead of TensorFlow, or a run directory, decoded by its Keras model under any backend; there --beam-size and
--length-penalty override the exported (or the run's `decode`) search settings (CTranslate2's length penalty divides
a score by length^alpha, not by GNMT's ((5 + length) / 6)^alpha).

Examples:
    echo "Tuesday, March 5, 1996" | kmt-translate runs/dates/<time>/export
    kmt-translate runs/multi30k/<time>/ctranslate2_int8 --beam-size 5 --input test.en --output test.hyp.de
    kmt-translate runs/multi30k/<time>/export --input test.en --prefixes starts.de --alignments
    printf 'A man is sleeping.\\tMann\\tschläft\\n' | kmt-translate runs/multi30k/<time>/export --constraints -
    kmt-translate runs/multi30k/<time>/export --glossary terms.tsv < test.en
    kmt-translate runs/multi30k/<time>/export page.html --output page.de.html
"""

import argparse
import collections
import contextlib
import os
import sys
from pathlib import Path

from kmt.cli import console_script
from kmt.cli.common import add_search_flags, search_overrides, setup_logging
from kmt.cli.errors import exit_on_user_error, fail
from kmt.errors import KmtError
from kmt.inference.alignments import pharaoh
from kmt.inference.glossary import Glossary
from kmt.inference.loading import load_translator, translator_kind
from kmt.inference.settings import SearchSettings
from kmt.inference.translate import translate_stream

SEARCH = ("beam_size", "length_penalty")  # the search flags it takes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="kmt-translate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "export_dir",
        help="a SavedModel written by kmt-train or kmt-export (a run's export/), a "
        "CTranslate2 directory (kmt-export RUN_DIR --format ctranslate2) or a run "
        "directory",
    )
    parser.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="a document to translate whole into --output, its layout kept: .txt (sentences split, lines kept), .md, "
        ".html/.htm/.xhtml (markup kept), .srt (timings kept), .docx (formatting kept), .po/.pot/.xliff/.xlf "
        "(untranslated units filled, marked fuzzy); without it, one sentence a line from --input",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default: 64)")
    parser.add_argument(
        "--buffer-size",
        type=int,
        help="lines read and sorted by length before they are translated and written (default: "
        "1000; 1 at a terminal, so each line is answered as it is entered)",
    )
    parser.add_argument("--input", default="-", help="file to translate instead of stdin")
    parser.add_argument("--output", default="-", help="file to write instead of stdout")
    parser.add_argument("--scores", action="store_true", help="prefix each line with its score and a TAB")
    parser.add_argument(
        "--nbest",
        type=int,
        metavar="N",
        help="write the N best translations of each line (N lines per input line, best first; "
        "fairseq's --nbest, OpenNMT-tf's n_best), from the beam of K hypotheses, N <= K "
        "(`kmt-export RUN_DIR --beam-size K` for a wider beam; not for CTranslate2)",
    )
    parser.add_argument(
        "--prefixes",
        metavar="FILE",
        help="target prefixes, one a line, line by line with the input (an empty line: none): each translation "
        "begins with its prefix and the search goes on from it (CTranslate2's target_prefix)",
    )
    parser.add_argument(
        "--constraints",
        metavar="FILE",
        help="translate FILE ('-': stdin) instead of --input, each line the sentence, then the target phrases its "
        "translation must contain, tab-separated (fairseq's --constraints layout); not for CTranslate2",
    )
    parser.add_argument(
        "--glossary",
        metavar="TSV",
        help="source term, TAB, target term a line (no header): each line's translation contains the target term "
        "of every source term found in it (whole words, case as given): constrained search (not for CTranslate2), "
        "or given inline to a model trained with data.terminology",
    )
    parser.add_argument(
        "--alignments",
        action="store_true",
        help="end each line in its word alignment: 'translation ||| 0-0 1-2 ...' (source word - target word, "
        "from 0, over whitespace-separated words; Marian's --alignment hard)",
    )
    search = parser.add_argument_group(
        "search settings, CTranslate2 and run directories only (default: the exported ones)"
    )
    add_search_flags(search, SEARCH)
    ct2 = parser.add_argument_group("CTranslate2 directories only")
    ct2.add_argument("--device", default="cpu", help="cpu, cuda or auto (default: cpu)")
    ct2.add_argument(
        "--compute-type",
        default="default",
        help="CTranslate2 compute type: default (the saved weights' type), int8, float32, float16, ... "
        "(default: default)",
    )
    ct2.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPU threads to decode with, each decoding its part of a batch (default: 0, one per core)",
    )
    parser.add_argument(
        "--attention-plots",
        metavar="DIR",
        help="also save cross-attention heatmaps (PNG, one per sentence, every layer and head) of "
        "the first --attention-limit input lines into DIR; needs the run directory (EXPORT_DIR "
        "or the one around it: its model.keras and tokenizer/)",
    )
    parser.add_argument("--attention-limit", type=int, default=10, help="sentences to plot (default: 10)")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="log progress to stderr (FILE: a progress bar at a terminal, shown anyway past 300 sentences)",
    )
    args = parser.parse_args(argv)
    for name in ("batch_size", "buffer_size", "nbest", "beam_size"):  # positive counts
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive. Received: {value}")
    return args


def open_input(path):
    """The binary stream to read: stdin for "-", else the file, with a one-line error if it cannot be opened."""
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as error:
        fail(f"cannot read {path}: {error.strerror}")


def read_lines(stream):
    """Yields the lines of a binary stream as str, without their line ends, as they arrive."""
    for raw in stream:
        # A stray bad byte becomes U+FFFD rather than stopping the job ("\n" never occurs inside a UTF-8 character).
        yield raw.decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r")


def load(args):
    """The translator of EXPORT_DIR, with the command line's batch size and CTranslate2 settings."""
    return load_translator(
        args.export_dir,
        batch_size=args.batch_size,
        device=args.device,
        compute_type=args.compute_type,
        threads=args.threads,
    )


def translate_file(args):
    """`kmt-translate EXPORT_DIR FILE --output OUT`: the whole file, by its extension (`kmt.documents`)."""
    line_flags = [f"--{name}" for name in ("input", "prefixes", "constraints", "nbest", "scores", "alignments")]
    given = [flag for flag in line_flags if getattr(args, flag[2:]) not in (None, False, "-")]
    if given:
        fail(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for one sentence a line, not for FILE")
    if args.output == "-":
        fail("FILE is translated into a file of its format: give --output")
    with exit_on_user_error():
        from kmt.documents import open_document, translate_document
        from kmt.run_dir import languages_of_run

        languages = languages_of_run(args.export_dir)
        # its format and text, checked before the model loads
        document = open_document(args.file, args.output, languages[0] if languages else "en")
        count = translate_document(
            load(args),
            document,
            args.output,
            glossary=None if args.glossary is None else Glossary.load(args.glossary),
            progress=True if args.verbose else None,
        )
    print(f"translated {count} sentences of {args.file} into {args.output}", file=sys.stderr)


@console_script
def main(argv=None):
    args = parse_args(argv)
    setup_logging(args.verbose)
    if args.file is not None:
        return translate_file(args)
    if (
        "-" not in (args.input, args.output)
        and os.path.exists(args.output)
        and os.path.exists(args.input)
        and os.path.samefile(args.output, args.input)
    ):
        fail(f"--output {args.output} is the --input file: writing would erase lines not yet read; write elsewhere")
    with exit_on_user_error():
        translator = load(args)
        settings, overrides = None, search_overrides(args, SEARCH)
        if any(value is not None for value in overrides.values()):
            settings = (translator.settings or SearchSettings()).replace(**overrides)
        checks = dict(settings=settings, nbest=args.nbest, alignments=args.alignments)
        glossary = None if args.glossary is None else Glossary.load(args.glossary)
        constraints = [] if args.constraints else None
        translator.translate(
            [], prefixes=[] if args.prefixes else None, constraints=constraints, glossary=glossary, **checks
        )
    if args.constraints and args.input != "-":
        fail("--constraints FILE is the input (each sentence, then its constraints): leave out --input")
    prefixes = None if args.prefixes is None else read_lines(open_input(args.prefixes))
    stream = open_input(args.constraints or args.input)
    pending = collections.deque()  # each line's phrases, from when it is read until it is translated
    constraints = iter(pending.popleft, None) if args.constraints else None
    interactive = stream.isatty()
    if interactive:
        print("kmt-translate: type a sentence and press Enter; Ctrl-D ends", file=sys.stderr)
    buffer_size = args.buffer_size or (1 if interactive else 1000)
    plotted = []  # the first lines, kept for --attention-plots

    def lines():
        for line in read_lines(stream):
            if constraints is not None:  # the sentence, then its phrases
                line, *phrases = line.split("\t")
                pending.append(phrases)
            if len(plotted) < args.attention_limit:
                plotted.append(line)
            yield line

    try:
        out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
    except OSError as error:
        fail(f"cannot write {args.output}: {error.strerror}")
    # stdin and stdout stay open for whoever called `main` (a test, a script); files are closed.
    keep = contextlib.nullcontext
    with keep() if stream is sys.stdin.buffer else stream, keep() if out is sys.stdout else out, exit_on_user_error():
        try:
            for hypotheses in translate_stream(
                translator,
                lines(),
                settings=settings,
                nbest=args.nbest or 1,
                buffer_size=buffer_size,
                progress=args.verbose,
                prefixes=prefixes,
                alignments=args.alignments,
                constraints=constraints,
                glossary=glossary,
            ):
                for hypothesis in hypotheses:
                    text = hypothesis.text.replace("\n", " ")  # one line out per hypothesis
                    if args.alignments:
                        text = f"{text} ||| {pharaoh(hypothesis.alignment)}"
                    out.write(f"{hypothesis.score:.4f}\t{text}\n" if args.scores else f"{text}\n")
                out.flush()  # out before the next lines are read, so a pipe or a terminal sees it now
        except BrokenPipeError:  # the reader left (`kmt-translate ... | head`): stop quietly, as Unix tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())  # so closing `out` cannot raise again
            raise SystemExit(141) from None  # 128 + SIGPIPE, what a shell reports for a tool killed by a closed pipe
    if args.attention_plots:
        run_dir = Path(args.export_dir).resolve()
        plot_attention(run_dir if translator_kind(run_dir) == "run" else run_dir.parent, plotted, args.attention_plots)


def plot_attention(run_dir, sentences, directory):
    """Heatmaps from the run's Keras model (the SavedModel does not expose attention weights)."""
    with exit_on_user_error():
        from kmt.run_dir import RunDir

        run = RunDir(run_dir)
        if not run.model.is_file() or not run.tokenizer.is_dir():
            raise KmtError(f"--attention-plots needs {run.model} and {run.tokenizer}")
        from kmt.checkpoints import load_run_keras
        from kmt.plots import save_attention_plots

        _, vocabularies, model = load_run_keras(run_dir)
        paths = save_attention_plots(model, vocabularies, sentences, directory)
        print(f"wrote {len(paths)} attention plots to {directory}", file=sys.stderr)


if __name__ == "__main__":
    main()
