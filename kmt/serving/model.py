"""The model a server runs: `load_model(path)` -> an object with `signatures` and `run(signature, inputs)`.

This is the one place that knows what an export is. A SavedModel written by kmt (`kmt/inference/export.py`) loads
as `SavedModelRunner`; another runtime (a CTranslate2 directory, say) plugs in by returning, from `load_model`, an
object with the same two members for the directories it recognises. Nothing else in `kmt.serving` imports
TensorFlow.
"""

import dataclasses
from pathlib import Path

from kmt.errors import KmtError


@dataclasses.dataclass(frozen=True)
class Signature:
    """The input and output names of one signature, sorted; every input is a batch of strings, `[None]`."""

    inputs: tuple
    outputs: tuple


def check_model_path(path):
    """Raises `KmtError` unless `path` is a directory `load_model` can load (cheap: nothing is imported)."""
    path = Path(path)
    if not (path / "saved_model.pb").is_file():
        raise KmtError(f"{path} is not a SavedModel directory (no saved_model.pb); pass a run's export/ directory")


def load_model(path):
    """The model at `path` (a kmt SavedModel export directory), loaded and ready to `run`."""
    check_model_path(path)
    return SavedModelRunner(path)


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
        self.signatures = {
            name: Signature(inputs=tuple(sorted(function.structured_input_signature[1])),
                            outputs=tuple(sorted(function.structured_outputs)))
            for name, function in self._functions.items()
        }

    def run(self, signature, inputs):
        """Calls `signature` on `inputs` ({input name: list of str}, each of the batch's length); returns
        {output name: list} (strings as str, numbers as Python numbers, n-best outputs as lists of lists)."""
        import tensorflow as tf

        tensors = {name: tf.constant(values, dtype=tf.string, shape=[len(values)]) for name, values in inputs.items()}
        outputs = self._functions[signature](**tensors)
        return {name: _python(tensor.numpy().tolist()) for name, tensor in outputs.items()}


def _python(value):
    if isinstance(value, list):
        return [_python(item) for item in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value
