"""Helpers the entry points share: logging set up the same way, TensorFlow's chatter kept out."""

import logging
import sys

from kmt.cli.errors import quiet_tensorflow


def setup_logging(verbose=False):
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    quiet_tensorflow()
