"""The exported SavedModel loads in a fresh process both ways: TF2 (`tf.saved_model.load`) and TF1 sessions (what
`saved_model_cli run` and TensorFlow Serving use: they restore the variables with the saver's restore op only)."""

import json
import os
import subprocess
import sys

import numpy as np

from kmt.inference.export import export_translator
from kmt.inference.settings import SearchSettings
from kmt.inference.translator import TranslatorModule
from kmt.models import Transformer
from kmt.tokenizer import Vocabularies, train_tokenizer

SENTENCES = ["Tuesday, March 5, 1996", "1996-03-05", "Friday, June 14, 2002", "2002-06-14", "7 May 1971", "1971-05-07"]
INPUTS = ["Tuesday, March 5, 1996", "", "June 14"]

LOAD_BOTH_WAYS = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops

directory, inputs = sys.argv[1], json.loads(sys.argv[2])
outputs = {}
loaded = tf.saved_model.load(directory)
for name in ("translate", "serving_default"):
    result = loaded.signatures[name](text=tf.constant(inputs))
    outputs["tf2_" + name] = {k: v.numpy().tolist() for k, v in result.items()}
with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], directory)
    for name in ("translate", "serving_default"):
        signature = meta_graph.signature_def[name]
        fetches = {k: v.name for k, v in signature.outputs.items()}
        result = session.run(fetches, {signature.inputs["text"].name: inputs})
        outputs["tf1_" + name] = {k: np.asarray(v).tolist() for k, v in result.items()}
for side in outputs.values():
    side["translation"] = [t.decode("utf-8") for t in side["translation"]]
print("RESULT " + json.dumps(outputs))
"""


def test_export_loads_with_tf2_and_tf1_session_loaders(tmp_path):
    tokenizer = train_tokenizer(SENTENCES * 20, vocab_size=48, byte_fallback=False)
    vocabularies = Vocabularies(tokenizer, tokenizer)
    # Dropout > 0 so the model also holds seed-generator variables that decoding never reads.
    model = Transformer(
        tokenizer.vocab_size, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.1, max_length=24
    )
    translator = TranslatorModule(model, vocabularies, SearchSettings.of(beam_size=3))  # beam search: the larger graph
    expected = translator.translate(np.array(INPUTS, dtype=object))
    expected = {
        "translation": [t.decode("utf-8") for t in expected["translation"].numpy()],
        "score": expected["score"].numpy(),
    }
    export_translator(translator, tmp_path / "export")

    # Each weight is stored once: the checkpoint holds about the model's weights, not twice them.
    data = sum(f.stat().st_size for f in (tmp_path / "export" / "variables").glob("variables.data-*"))
    weights = sum(np.asarray(w).nbytes for w in model.get_weights())
    assert weights <= data < 1.2 * weights + 4096

    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3"}
    process = subprocess.run(
        [sys.executable, "-c", LOAD_BOTH_WAYS, str(tmp_path / "export"), json.dumps(INPUTS)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    line = next(line for line in process.stdout.splitlines() if line.startswith("RESULT "))
    results = json.loads(line[len("RESULT ") :])
    assert set(results) == {"tf2_translate", "tf2_serving_default", "tf1_translate", "tf1_serving_default"}
    for name, result in results.items():
        assert result["translation"] == expected["translation"], name
        np.testing.assert_allclose(result["score"], expected["score"], rtol=1e-5, atol=1e-5, err_msg=name)
    assert expected["translation"][1] == ""
