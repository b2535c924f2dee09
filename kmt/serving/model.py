"""The model a server runs: `load_model(path)` -> an object with `signatures` and `run(signature, inputs)`.

The model is opened by `kmt.inference.loading.load_translator`, which tells what kind of path it is. A SavedModel
written by kmt (`kmt/inference/export.py`) runs as `SavedModelRunner`, every signature it has; a CTranslate2 directory
(`kmt-export --format ctranslate2`) or a run directory as `TranslatorRunner`, which answers the SavedModel's text
signatures (`translate`, `serving_default`, `translate_prefix`, `translate_constrained`, `translate_align`,
`align`). Nothing else in
`kmt.serving` imports TensorFlow or CTranslate2.
"""

import dataclasses
import math
from pathlib import Path

from kmt.errors import KmtError


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One input or output of a signature, as TensorFlow Serving's metadata describes it."""

    dtype: str  # TensorFlow's DataType name: "DT_STRING", "DT_FLOAT", "DT_INT32"
    shape: tuple  # -1 for a dimension of any size; None for an unknown rank
    name: str  # the graph tensor's name ("serving_default_text:0"), or the input's name outside a graph


@dataclasses.dataclass(frozen=True)
class Signature:
    """One signature: {input name: `Tensor`} and {output name: `Tensor`}, sorted by name; every input is a batch
    of strings, `[None]`."""

    inputs: dict
    outputs: dict


def check_model_path(path):
    """Raises `KmtError` unless `path` is a directory `load_model` can load (cheap: nothing is imported)."""
    from kmt.inference.loading import translator_kind

    translator_kind(path)


def load_model(path):
    """The model at `path` (a kmt SavedModel export, CTranslate2 directory or run directory), loaded and ready to
    `run`."""
    from kmt.inference.loading import load_translator
    from kmt.inference.saved_model_translator import SavedModelTranslator

    # The server's batcher makes the batches (--max-batch-size): one call of the translator decodes one.
    translator = load_translator(path, batch_size=BATCH_SIZE)
    return (
        SavedModelRunner(translator) if isinstance(translator, SavedModelTranslator) else TranslatorRunner(translator)
    )


BATCH_SIZE = 1024  # most sentences one `run` decodes together


def warm_up(model, name):
    """Runs `model`'s signature `name` once on one sentence (graph optimization, kernel set-up), so that the first
    request pays for none of it."""
    inputs = {  # a list of strings for a [None, None] input
        key: [["warm up"]] if tensor.shape is not None and len(tensor.shape) == 2 else ["warm up"]
        for key, tensor in model.signatures[name].inputs.items()
    }
    model.run(name, inputs)


class TranslatorRunner:
    """A `kmt.inference.translators.Translator` (a CTranslate2 directory, a run directory's Keras model; its own
    search settings) behind the SavedModel's text-to-text signatures: `translate` and `serving_default` (`text` in,
    `translation` and `score` out), `translate_prefix` (`text` and `prefix` in), `translate_constrained` (`text`
    and `constraints`, a list of phrases a sentence, in; not for CTranslate2), and, for a Transformer,
    `translate_align` (`alignment` out too) and `align` (`source` and `target` in, `alignment` out)."""

    def __init__(self, translator):
        self._translator = translator
        self.inline_terms = translator.inline_terms  # it takes a glossary's terms inline in `text`
        text = {"text": Tensor("DT_STRING", (-1,), "text")}
        translated = {
            "score": Tensor("DT_FLOAT", (-1,), "score"),
            "translation": Tensor("DT_STRING", (-1,), "translation"),
        }
        alignment = {"alignment": Tensor("DT_STRING", (-1,), "alignment")}
        prefix = {**text, "prefix": Tensor("DT_STRING", (-1,), "prefix")}
        self.signatures = {
            "serving_default": Signature(text, translated),
            "translate": Signature(text, translated),
            "translate_prefix": Signature(prefix, translated),
        }
        try:
            translator.translate([], constraints=[])
            constraints = Tensor("DT_STRING", (-1, -1), "constraints")
            self.signatures["translate_constrained"] = Signature({**text, "constraints": constraints}, translated)
        except KmtError:  # CTranslate2 cannot constrain, nor can a sampling search
            pass
        try:
            translator.align([], [])
        except KmtError:  # a model that cannot align (an LSTM)
            return
        pair = {"source": Tensor("DT_STRING", (-1,), "source"), "target": Tensor("DT_STRING", (-1,), "target")}
        self.signatures["translate_align"] = Signature(text, {**alignment, **translated})
        self.signatures["align"] = Signature(pair, alignment)

    def run(self, signature, inputs):
        from kmt.inference.alignments import pharaoh

        if signature == "align":
            return {"alignment": [pharaoh(a) for a in self._translator.align(inputs["source"], inputs["target"])]}
        best = self._translator.translate(
            list(inputs["text"]),
            nbest=1,
            prefixes=inputs.get("prefix"),
            alignments=signature == "translate_align",
            # "" pads a SavedModel's table of phrases: no phrase
            constraints=None if "constraints" not in inputs else [[p for p in c if p] for c in inputs["constraints"]],
            long_prefixes="keep",
        )
        outputs = {"translation": [h[0].text for h in best], "score": [h[0].score for h in best]}
        if signature == "translate_align":
            outputs["alignment"] = [pharaoh(h[0].alignment) for h in best]
        return {name: _python(values) for name, values in outputs.items()}


class SavedModelRunner:
    """A kmt SavedModel (a `kmt.inference.saved_model_translator.SavedModelTranslator`): `signatures` maps each
    signature's name to its `Signature`; `run` calls one.

    One loaded SavedModel answers concurrent calls as it answers serial ones, so `run` may be called from several
    threads at once.
    """

    def __init__(self, translator):
        self._functions = translator.signatures
        self.inline_terms = translator.inline_terms  # it takes a glossary's terms inline in `text`
        self.signatures = _signatures(Path(translator.path) / "saved_model.pb", self._functions)

    def run(self, signature, inputs):
        """Calls `signature` on `inputs` ({input name: list of str}, each of the batch's length); returns
        {output name: list} (strings as str, numbers as Python numbers, n-best outputs as lists of lists)."""
        import tensorflow as tf

        tensors = {name: _tensor(tf, values) for name, values in inputs.items()}
        outputs = self._functions[signature](**tensors)
        return {name: _python(tensor.numpy().tolist()) for name, tensor in outputs.items()}


def _tensor(tf, values):
    """A batch of strings, or of lists of strings padded with "" to the longest (`[None, None]` inputs)."""
    if values and isinstance(values[0], list):
        width = max(map(len, values))
        return tf.constant(
            [[*row, *[""] * (width - len(row))] for row in values], tf.string, shape=[len(values), width]
        )
    return tf.constant(values, dtype=tf.string, shape=[len(values)])


def _signatures(saved_model_pb, names):
    """{name: `Signature`} for each of `names`, from the SavedModel's signature defs (what TensorFlow Serving's
    metadata reports)."""
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    graph = saved_model_pb2.SavedModel.FromString(saved_model_pb.read_bytes()).meta_graphs[0]

    def tensors(infos):
        return {
            key: Tensor(
                types_pb2.DataType.Name(info.dtype),
                None if info.tensor_shape.unknown_rank else tuple(d.size for d in info.tensor_shape.dim),
                info.name,
            )
            for key, info in sorted(infos.items())
        }

    return {
        name: Signature(tensors(graph.signature_def[name].inputs), tensors(graph.signature_def[name].outputs))
        for name in names
    }


def _python(value):
    """A signature's output as JSON takes it: lists, str, and None for NaN (a score the model cannot give)."""
    if isinstance(value, list):
        return [_python(item) for item in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
