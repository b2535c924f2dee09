"""Helpers the entry points share: logging set up the same way, TensorFlow's chatter kept out."""

import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from kmt.cli.errors import quiet_tensorflow  # noqa: E402


def setup_logging(verbose=False):
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    quiet_tensorflow()
