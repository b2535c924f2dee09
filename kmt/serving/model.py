"""The model a server runs: `load_model(path)` -> an object with `signatures` and `run(signature, inputs)`.

This is the one place that knows what an export is. A SavedModel written by kmt (`kmt/inference/export.py`) loads
as `SavedModelRunner`, a CTranslate2 directory (`kmt-export --format ctranslate2`) as `CTranslate2Runner`, which
answers the SavedModel's `translate` and `serving_default` signatures. Nothing else in `kmt.serving` imports
TensorFlow or CTranslate2.
"""

import dataclasses
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
    from kmt.inference.ctranslate2 import is_ctranslate2_dir, require_ctranslate2

    path = Path(path)
    if is_ctranslate2_dir(path):
        require_ctranslate2()  # one line naming the extra, when it is missing
    elif not (path / "saved_model.pb").is_file():
        raise KmtError(f"{path} is neither a SavedModel directory (no saved_model.pb) nor a CTranslate2 one; pass a "
                       "run's export/ directory or the output of kmt-export --format ctranslate2")


def load_model(path):
    """The model at `path` (a kmt SavedModel export or CTranslate2 directory), loaded and ready to `run`."""
    from kmt.inference.ctranslate2 import is_ctranslate2_dir

    check_model_path(path)
    return CTranslate2Runner(path) if is_ctranslate2_dir(path) else SavedModelRunner(path)


class CTranslate2Runner:
    """A kmt CTranslate2 directory (`kmt.inference.ctranslate2.CT2Translator`, its exported search settings) behind
    the SavedModel's text-to-text signatures, `translate` and `serving_default`: `text` in, `translation` and `score`
    out. CTranslate2 queues concurrent calls itself."""

    def __init__(self, path):
        from kmt.inference.ctranslate2 import CT2Translator

        self._translator = CT2Translator(path)
        text = Signature(inputs={"text": Tensor("DT_STRING", (-1,), "text")},
                         outputs={"score": Tensor("DT_FLOAT", (-1,), "score"),
                                  "translation": Tensor("DT_STRING", (-1,), "translation")})
        self.signatures = {"serving_default": text, "translate": text}

    def run(self, signature, inputs):
        translations, scores = self._translator.translate(list(inputs["text"]))
        return {"translation": translations, "score": [float(score) for score in scores]}


class SavedModelRunner:
    """A kmt SavedModel: `signatures` maps each signature's name to its `Signature`; `run` calls one.

    One loaded SavedModel answers concurrent calls as it answers serial ones, so `run` may be called from several
    threads at once.
    """

    def __init__(self, path):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the graph uses)

        self._loaded = tf.saved_model.load(str(path))
        self._functions = dict(self._loaded.signatures)
        if "translate" not in self._functions:
            raise KmtError(f"{path} has no 'translate' signature; was it exported by kmt?")
        self.signatures = _signatures(Path(path) / "saved_model.pb", self._functions)

    def run(self, signature, inputs):
        """Calls `signature` on `inputs` ({input name: list of str}, each of the batch's length); returns
        {output name: list} (strings as str, numbers as Python numbers, n-best outputs as lists of lists)."""
        import tensorflow as tf

        tensors = {name: tf.constant(values, dtype=tf.string, shape=[len(values)]) for name, values in inputs.items()}
        outputs = self._functions[signature](**tensors)
        return {name: _python(tensor.numpy().tolist()) for name, tensor in outputs.items()}


def _signatures(saved_model_pb, names):
    """{name: `Signature`} for each of `names`, from the SavedModel's signature defs (what TensorFlow Serving's
    metadata reports)."""
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    graph = saved_model_pb2.SavedModel.FromString(saved_model_pb.read_bytes()).meta_graphs[0]

    def tensors(infos):
        return {key: Tensor(types_pb2.DataType.Name(info.dtype),
                            None if info.tensor_shape.unknown_rank else tuple(d.size for d in info.tensor_shape.dim),
                            info.name)
                for key, info in sorted(infos.items())}

    return {name: Signature(tensors(graph.signature_def[name].inputs), tensors(graph.signature_def[name].outputs))
            for name in names}


def _python(value):
    if isinstance(value, list):
        return [_python(item) for item in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value
