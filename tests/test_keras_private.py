"""The private Keras APIs kmt uses (`kmt/_keras_private.py`) were checked against the Keras installed, and are the only
ones in kmt."""

from pathlib import Path

import keras

from kmt._keras_private import TESTED_KERAS

KMT = Path(__file__).resolve().parents[1] / "kmt"


def test_keras_is_a_version_the_private_apis_were_checked_against():
    assert keras.__version__ in TESTED_KERAS, (
        f"Keras {keras.__version__} is not one that kmt's private Keras APIs were checked against "
        f"({', '.join(TESTED_KERAS)}): check each use kmt/_keras_private.py lists, then add it to TESTED_KERAS"
    )


def test_no_other_kmt_module_reaches_into_keras_src():
    reaching = [path.relative_to(KMT).as_posix() for path in KMT.rglob("*.py") if "keras.src" in path.read_text()]
    assert reaching == ["_keras_private.py"]
