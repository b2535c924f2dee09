"""Fast decoding with CTranslate2 (OpenNMT's C++ inference engine): a run's model written as a CTranslate2 model
directory (`export_ctranslate2`), and text to text with one (`CT2Translator`, a
`kmt.inference.translators.Translator`).

A kmt CTranslate2 directory holds CTranslate2's `model.bin`, `config.json` and vocabularies (`shared_vocabulary.json`
for a joint vocabulary, else `source_vocabulary.json` and `target_vocabulary.json`), the run's SentencePiece
model(s) (`joint.model`, or `source.model` and `target.model`, as in a run's `tokenizer/`) and `kmt_decode.json`,
the search settings of the run's `decode` section (beam size, length penalty, output limits, `max_length`).

Greedy search gives kmt's tokens (from a target prefix too: CTranslate2's `target_prefix`), and word alignments are
kmt's (CTranslate2's `return_attention`, from the layer and heads kmt's alignments read): each sentence emits at most
`min(max_length, ceil(max_length_a * S + max_length_b))` tokens, its end token included, and the pad and start
tokens are never emitted. Beam search differs in one thing, the length penalty: CTranslate2 ranks finished
hypotheses by `log P(Y) / |Y|^alpha`, kmt by GNMT's
`log P(Y) / ((5 + |Y|) / 6)^alpha`, so the two may choose different beams, and their scores are not comparable.

On a CPU a `CT2Translator` decodes as Marian and Bergamot do: one thread per worker, as many workers as there are
cores, each batch split among them (CTranslate2's `inter_threads` and `max_batch_size`). CTranslate2's own default,
one worker that spreads each operation over the cores, pays a synchronisation per operation, which cost more than it
gained at every size measured (docs/experiments/performance.md, "CTranslate2's threads").

`ctranslate2` is an optional dependency (`pip install "kmt[ctranslate2]"`); this module imports it only when a
model is converted or loaded.

Example:
>>> translator = CT2Translator("runs/dates/<time>/ctranslate2")  # doctest: +SKIP
>>> greedy = translator.settings.replace(beam_size=1)  # doctest: +SKIP
>>> translator.translate(["Tuesday, March 5, 1996"], settings=greedy)  # doctest: +SKIP
['1996-03-05']
"""

import json
import math
import os
from pathlib import Path

from kmt.errors import KmtError
from kmt.inference.glossary import MARKERS
from kmt.inference.settings import SearchSettings
from kmt.inference.translators import BatchedTranslator, Hypothesis, Score
from kmt.run_dir import read_json, write_atomically
from kmt.special_ids import END_ID, PAD_ID, START_ID
from kmt.tokenizer import Vocabularies

MISSING = 'CTranslate2 is not installed: pip install "kmt[ctranslate2]"'
QUANTIZATIONS = ("int8", "int16", "float16")  # besides float32, the default: CTranslate2's weight types
SETTINGS = "kmt_decode.json"
SEARCH_KEYS = ("beam_size", "length_penalty", "max_length_a", "max_length_b")


def require_ctranslate2():
    """The `ctranslate2` module; a `KmtError` naming the extra to install when it is missing."""
    try:
        import ctranslate2
    except ImportError:
        raise KmtError(MISSING) from None
    return ctranslate2


def _default_workers(ctranslate2, device):
    """The workers a `CT2Translator` on `device` runs by default: one per CPU core this process may use on a CPU,
    one on a GPU."""
    if device == "cuda" or (device == "auto" and ctranslate2.get_cuda_device_count() > 0):
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def is_ctranslate2_dir(path):
    """Whether `path` is a CTranslate2 model directory written by `kmt-export --format ctranslate2`."""
    path = Path(path)
    return all((path / name).is_file() for name in ("model.bin", "config.json", SETTINGS))


def export_ctranslate2(model, vocabularies, settings: SearchSettings, output, quantization=None):
    """Writes `model` (a float32 `kmt.models.Transformer`), its vocabularies and the search settings as
    a CTranslate2 model directory at `output`, replacing what was there only once the new one is complete.

    Args:
        model: a `kmt.models.Transformer`.
        vocabularies: the run's `kmt.tokenizer.Vocabularies`.
        settings: the `SearchSettings` to write (`beam_size`, `length_penalty`, `max_length_a`, `max_length_b`; the
            model's `max_length`).
        output: the directory to write.
        quantization: None (float32), or one of `QUANTIZATIONS`: the type the weights are stored in (CTranslate2
            loads them in whatever type the device supports; `compute_type` chooses). Defaults to `None`.

    Returns the size of the directory in bytes.
    """
    if quantization not in (None, *QUANTIZATIONS):
        raise KmtError(
            f"unknown quantization {quantization!r}; choose one of {', '.join(QUANTIZATIONS)} (or none for float32)"
        )
    require_ctranslate2()
    from kmt.inference.ct2_converter import KmtConverter

    settings.strategy.require("ctranslate2")
    written = {key: settings.options()[key] for key in SEARCH_KEYS}
    written["max_length"] = model.max_length

    def write(partial):
        KmtConverter(model, vocabularies).convert(str(partial), quantization=quantization, force=True)
        vocabularies.save(partial)
        for readable in Path(partial).glob("*.vocab"):  # the SentencePiece models are what decoding needs
            readable.unlink()
        (Path(partial) / SETTINGS).write_text(json.dumps(written, indent=2) + "\n")

    output = Path(output)
    write_atomically(output, write)
    return sum(f.stat().st_size for f in output.rglob("*") if f.is_file())


class CT2Translator(BatchedTranslator):
    """Text to text with a kmt CTranslate2 directory: SentencePiece encode, `ctranslate2.Translator.translate_batch`
    (`score_batch` to score), SentencePiece decode; greedy or beam search, one hypothesis a sentence.

    Args:
        path: a directory written by `kmt-export RUN_DIR --format ctranslate2`.
        device: `"cpu"`, `"cuda"` or `"auto"`. Defaults to `"cpu"`.
        compute_type: CTranslate2's compute type (`"default"`: the type the weights were saved in, or the nearest
            the device supports; `"int8"`, `"float32"`, ...). Defaults to `"default"`.
        inter_threads: workers, which decode a batch's parts at once (0: one per CPU core on a CPU, one on a GPU).
            Defaults to `0`.
        intra_threads: threads per worker (0: CTranslate2's default, 4 or the cores there are). Defaults to `1`.
        batch_size: sentences per batch of `translate` and `score`. Defaults to `64`.

    Attributes:
        settings: the exported `SearchSettings` (their `max_length` is the model's).
    """

    def __init__(self, path, device="cpu", compute_type="default", inter_threads=0, intra_threads=1, batch_size=64):
        ctranslate2 = require_ctranslate2()

        path = Path(path)
        if not is_ctranslate2_dir(path):
            raise KmtError(
                f"{path} is not a kmt CTranslate2 directory (model.bin, config.json, {SETTINGS}); write "
                "one with `kmt-export RUN_DIR --format ctranslate2`"
            )
        written = read_json(path / SETTINGS, "export the run again with `kmt-export RUN_DIR --format ctranslate2`")
        self.settings = SearchSettings.of(**written)
        self.path = path
        self.max_length = written["max_length"]
        self.batch_size = batch_size
        self.vocabularies = Vocabularies.load(path)
        self.inline_terms = self.vocabularies.source.holds(MARKERS)
        self.source_pieces = self.vocabularies.source.pieces
        self.target_pieces = self.vocabularies.target.pieces
        self.target_ids = {piece: i for i, piece in enumerate(self.target_pieces)}
        self.never = [self.target_pieces[PAD_ID], self.target_pieces[START_ID]]  # pieces kmt's searches never emit
        self.workers = inter_threads or _default_workers(ctranslate2, device)
        try:
            self.translator = ctranslate2.Translator(
                str(path),
                device=device,
                compute_type=compute_type,
                inter_threads=self.workers,
                intra_threads=intra_threads,
            )
        except (ValueError, RuntimeError) as error:  # an unknown device or type, no GPU, a damaged model.bin
            raise KmtError(
                f"CTranslate2 cannot load {path} on device {device!r} with compute type {compute_type!r}: {error}"
            ) from None

    def search(self, sources, settings: SearchSettings | None = None, prefixes=None):
        """Best translation of each row of source ids (lists or arrays, no start or end token): `(ids, scores)`, a
        list of int lists without start or end token and a list of float scores (greedy: the sum of the
        log-probabilities, the end token's and a prefix's included; beam: divided by CTranslate2's length penalty, a
        prefix's tokens not scored).

        Rows are cut to the model's `max_length` tokens; `settings` (default: the exported ones) set the beam size,
        length penalty and output limits (`max_length` at most the model's). An empty row gives `[]`, 0. `prefixes`,
        rows of target ids, are what each translation begins with; one longer than its sentence's limit gives
        `[]` and a NaN score.
        """
        from kmt.inference.lengths import decode_length

        settings = settings or self.settings
        self._check(settings)
        max_length = min(settings.max_length or self.max_length, self.max_length)
        rows = [[self.source_pieces[i] for i in row[: self.max_length]] for row in sources]
        limits = [decode_length(len(row), max_length, settings.max_length_a, settings.max_length_b) for row in rows]
        results = [([], 0.0)] * len(rows)
        alpha = settings.length_penalty if settings.beam_size > 1 else 0  # CTranslate2 would divide greedy scores too
        search = dict(beam_size=settings.beam_size, length_penalty=alpha)
        nonempty = [i for i, row in enumerate(rows) if len(row) > self.vocabularies.source.added]
        if prefixes is not None:
            prefix_pieces = [[self.target_pieces[i] for i in row] for row in prefixes]
            for i in [i for i in nonempty if len(prefix_pieces[i]) > limits[i]]:
                results[i] = ([], math.nan)
            nonempty = [i for i in nonempty if len(prefix_pieces[i]) <= limits[i]]
            search["target_prefix"] = prefix_pieces
        padded = self._search_rows(rows, limits, nonempty, results, search)
        # kmt never emits the pad or start token. Suppressing them in CTranslate2 would renormalise the other tokens'
        # probabilities (kmt leaves their share out instead), so only a sentence that emitted one is decoded again.
        suppressed = dict(search, suppress_sequences=[[piece] for piece in self.never])
        self._search_rows(rows, limits, padded, results, suppressed)
        if prefixes is not None and alpha == 0:
            self._score_whole(rows, prefix_pieces, results)
        return [ids for ids, _ in results], [score for _, score in results]

    def _score_whole(self, rows, prefixes, results):
        """CTranslate2 scores only the tokens after a target prefix, kmt the whole translation (comparable across
        prefixes): greedy search adds the prefix's log-probability, the prefix scored as the search forced it."""
        chosen = [i for i, (_, score) in enumerate(results) if 0 < len(prefixes[i]) < self.max_length]
        chosen = [i for i in chosen if not math.isnan(results[i][1])]
        if not chosen:
            return
        scored = self.translator.score_batch(
            [rows[i] for i in chosen], [prefixes[i] for i in chosen], max_batch_size=self._part(len(chosen))
        )
        for i, result in zip(chosen, scored):
            ids, score = results[i]
            results[i] = (ids, score + float(sum(result.log_probs[:-1])))  # the end token score_batch adds left out

    def _search_rows(self, rows, limits, pending, results, search):
        """Decodes `rows[i]` for each i in `pending` into `results[i]`; returns those whose output holds the pad or
        start token (and only when `search` does not suppress them)."""
        padded = []
        while pending:
            # One call at the batch's longest limit; a sentence whose output runs past its own (shorter) limit is
            # decoded again with that limit, with the others that share it. Greedy search stops where kmt's does.
            limit = max(limits[i] for i in pending)
            options = dict(search)
            if "target_prefix" in search:
                options["target_prefix"] = [search["target_prefix"][i] for i in pending]
            outputs = self.translator.translate_batch(
                [rows[i] for i in pending],
                max_batch_size=self._part(len(pending)),
                max_decoding_length=limit,
                min_decoding_length=0,
                max_input_length=0,
                return_scores=True,
                **options,
            )
            overlong = []
            for i, output in zip(pending, outputs):
                tokens = output.hypotheses[0]
                if limits[i] < limit and len(tokens) >= limits[i]:
                    overlong.append(i)  # its own limit would have stopped it sooner: decode it again with that
                elif "suppress_sequences" not in search and any(piece in tokens for piece in self.never):
                    padded.append(i)
                else:
                    results[i] = ([self.target_ids[t] for t in tokens], float(output.scores[0]))
            pending = overlong  # their longest limit is below this call's: the loop ends
        return padded

    def _part(self, rows):
        """CTranslate2's `max_batch_size` for a call on `rows` sentences: a part for each worker."""
        return math.ceil(rows / self.workers)

    def _checked(self, settings, nbest):
        settings = (settings or self.settings).replace(nbest=None if nbest == 1 else nbest)
        self._check(settings)
        return settings

    def _check(self, settings):
        settings.strategy.require("ctranslate2")

    def _check_features(self, prefixes=False, alignments=False, nbest=1, constraints=False):
        if constraints:
            raise KmtError(
                f"{self.path} is a CTranslate2 directory, which cannot constrain a translation: the SavedModel "
                "(`kmt-export RUN_DIR`) or the run directory can"
            )

    def _translate_batch(self, lines, settings, nbest, prefixes, constraints=None):
        prefix_ids = None if prefixes is None else self.vocabularies.target.encode(prefixes)
        ids, scores = self.search(self.vocabularies.source.encode(lines), settings, prefix_ids)
        texts = self.vocabularies.target.decode([[i for i in row if i > END_ID] for row in ids])
        return [[Hypothesis(text, float(score))] for text, score in zip(texts, scores)]

    def _align_batch(self, sources, targets):
        """As the SavedModel's `align`: the target forced as CTranslate2's `target_prefix`, its attention read."""
        import numpy as np

        from kmt.inference.alignments import NumpyOps, links, piece_kinds, word_alignment

        source_rows = [row[: self.max_length] for row in self.vocabularies.source.encode(sources)]
        target_rows = [row[: self.max_length - 1] for row in self.vocabularies.target.encode(targets)]
        results = [()] * len(source_rows)
        pending = [i for i in range(len(source_rows)) if len(target_rows[i]) and len(source_rows[i])]
        if not pending:
            return results
        outputs = self.translator.translate_batch(
            [[self.source_pieces[i] for i in source_rows[j]] for j in pending],
            target_prefix=[[self.target_pieces[i] for i in target_rows[j]] for j in pending],
            max_batch_size=self._part(len(pending)),
            max_decoding_length=max(len(target_rows[j]) for j in pending),
            min_decoding_length=0,
            max_input_length=0,
            beam_size=1,
            return_attention=True,
        )
        width_s = max(len(source_rows[j]) for j in pending)
        width_t = max(len(target_rows[j]) for j in pending)
        attention = np.zeros((len(pending), width_t, width_s), np.float32)  # (B, T, S)
        source = np.zeros((len(pending), width_s), np.int32)
        target = np.zeros((len(pending), width_t), np.int32)
        for b, (j, output) in enumerate(zip(pending, outputs)):
            rows = np.asarray(output.attention[0], np.float32)[: len(target_rows[j])]  # the target's steps
            attention[b, : len(rows), : len(source_rows[j])] = rows
            source[b, : len(source_rows[j])] = source_rows[j]
            target[b, : len(target_rows[j])] = target_rows[j]
        kinds = piece_kinds(self.vocabularies.source), piece_kinds(self.vocabularies.target)
        best = word_alignment(attention, source, target, *kinds, ops=NumpyOps())
        for j, row in zip(pending, best):
            results[j] = links(row)
        return results

    def _score_batch(self, sources, targets):
        """As the SavedModel's `score`: the log-probabilities of the target's tokens and the end token."""
        source_rows, target_rows, fits, results = self._scoring_rows(sources, targets)
        if fits:
            outputs = self.translator.score_batch(
                [[self.source_pieces[i] for i in source_rows[j]] for j in fits],
                [[self.target_pieces[i] for i in target_rows[j]] for j in fits],
                max_batch_size=self._part(len(fits)),
                max_input_length=0,
            )
            for i, output in zip(fits, outputs):
                results[i] = Score(float(sum(output.log_probs)), results[i].tokens)
        return results
