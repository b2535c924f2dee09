"""`SavedModelTranslator`: a kmt SavedModel export as a `kmt.inference.translators.Translator`."""

import logging

from kmt._startup import paused_gc
from kmt.errors import KmtError
from kmt.inference.translators import BatchedTranslator, Hypothesis, Score, translate_signatures

logger = logging.getLogger(__name__)


class SavedModelTranslator(BatchedTranslator):
    """Text to text with a kmt SavedModel export (`kmt-export`, a run's `export/`): its `translate`,
    `translate_nbest`, `translate_prefix`, `score` and `align` signatures, with the search settings baked in
    (`settings` is None).

    Args:
        path: the SavedModel directory.
        batch_size: sentences per batch. Defaults to `64`.
    """

    settings = None

    def __init__(self, path, *, batch_size: int = 64):
        import tensorflow as tf

        with paused_gc():  # the load rebuilds each function's graph in Python: thousands of lasting objects
            import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the graph uses)

            self.loaded = tf.saved_model.load(str(path))
        self.path, self.batch_size = path, batch_size
        self.signatures = _distinct(self.loaded.signatures)
        if "translate" not in self.signatures:
            raise KmtError(f"{path} has no 'translate' signature; was it exported by kmt?")
        self.inline_terms = hasattr(self.loaded, "inline_terms")  # kmt.inference.translator.TranslatorModule

    def signature(self, name):
        """The SavedModel's signature `name` (`translate`, `translate_nbest`, `translate_prefix`, `translate_align`,
        `score`, `align`)."""
        if name not in self.signatures:
            why = "it was exported by an older kmt; export the run again with `kmt-export RUN_DIR`"
            if name in ("align", "translate_align") and "translate_prefix" in self.signatures:
                why = "its model cannot align (alignments come from a Transformer's cross-attention)"
            raise KmtError(f"{self.path} has no '{name}' signature: {why}")
        return self.signatures[name]

    @property
    def beam_size(self) -> int:
        """K, the beam the export searches with (the hypotheses of its `translate_nbest`)."""
        return self.signature("translate_nbest").structured_outputs["translations"].shape[1]

    def _checked(self, settings, nbest):
        if settings is not None:
            raise KmtError(
                f"{self.path} is a SavedModel, whose search settings are baked in: export the run again "
                "with `kmt-export RUN_DIR --beam-size N --length-penalty A`"
            )
        if nbest > 1 and nbest > self.beam_size:
            raise KmtError(
                f"nbest {nbest} is more than the {self.beam_size} hypotheses of the export's beam; export "
                f"the run with `kmt-export RUN_DIR --beam-size {nbest}`"
            )
        return None

    def _check_features(self, prefixes=False, alignments=False, nbest=1, constraints=False):
        if constraints:
            self.signature("translate_constrained")
            if prefixes:
                raise KmtError(
                    f"{self.path} is a SavedModel, whose translate_constrained takes no prefix: prefixes with "
                    "constraints come from the run directory (`kmt-translate RUN_DIR --prefixes P --constraints C`)"
                )
            if nbest > 1:
                raise KmtError(
                    f"{self.path} is a SavedModel, whose translate_constrained gives the best translation: n-best "
                    "lists with constraints come from the run directory (`kmt-translate RUN_DIR --constraints FILE`)"
                )
        if prefixes:
            self.signature("translate_prefix")
            if nbest > 1:
                raise KmtError(
                    f"{self.path} is a SavedModel, whose translate_prefix gives the best translation: n-best "
                    "lists with prefixes come from the run directory (`kmt-translate RUN_DIR --prefixes FILE`)"
                )
        if alignments:
            self.signature("align")

    def _translate_batch(self, lines, settings, nbest, prefixes, constraints=None):
        import tensorflow as tf

        text = tf.constant(lines, tf.string)
        if constraints is not None:
            count = max(1, *map(len, constraints))
            table = [[*phrases, *[""] * (count - len(phrases))] for phrases in constraints]
            outputs = self.signature("translate_constrained")(text=text, constraints=tf.constant(table, tf.string))
            return [
                [Hypothesis(t.decode("utf-8"), float(s))]
                for t, s in zip(outputs["translation"].numpy(), outputs["score"].numpy())
            ]
        if prefixes is not None:
            outputs = self.signatures["translate_prefix"](text=text, prefix=tf.constant(prefixes, tf.string))
            return [
                [Hypothesis(t.decode("utf-8"), float(s))]
                for t, s in zip(outputs["translation"].numpy(), outputs["score"].numpy())
            ]
        nbest_signature = None if nbest == 1 else self.signature("translate_nbest")
        return translate_signatures(self.signatures["translate"], nbest_signature, text, nbest)

    def _align_batch(self, sources, targets):
        import tensorflow as tf

        from kmt.inference.alignments import parse_pharaoh

        outputs = self.signatures["align"](
            source=tf.constant(sources, tf.string), target=tf.constant(targets, tf.string)
        )
        return [parse_pharaoh(line.decode("utf-8")) for line in outputs["alignment"].numpy()]

    def _score_batch(self, sources, targets):
        import tensorflow as tf

        outputs = self.signature("score")(
            source=tf.constant(sources, tf.string), target=tf.constant(targets, tf.string)
        )
        return [Score(float(p), int(n)) for p, n in zip(outputs["score"].numpy(), outputs["length"].numpy())]


def _distinct(signatures):
    """{name: signature}, a signature that calls the same graph function with the same inputs and outputs as an
    earlier one (kmt's `serving_default` and `translate`) replaced by that one: TensorFlow sets a signature's graph up
    on its first call (graph optimization, kernels), and would do it again for the same function."""
    kept, by_function = {}, {}
    for name, signature in signatures.items():
        called = tuple(node.attr["f"].func.name for node in signature.function_def.node_def if "f" in node.attr)
        key = (called, repr(signature.structured_input_signature), repr(signature.structured_outputs))
        kept[name] = by_function.setdefault(key, signature)
    return kept
