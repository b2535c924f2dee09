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


def add_search_flags(parser, names):
    """Adds `--<name>` flags for the search options `names` (`kmt.inference.settings.OPTIONS`, where each is
    declared once with its type and why); a flag not given is None, which `SearchSettings.replace` skips."""
    import typing

    from kmt.inference.settings import OPTIONS

    for option in (o for o in OPTIONS if o.name in names):
        kind = next((t for t in typing.get_args(option.type) if t is not type(None)), option.type)
        parser.add_argument(f"--{option.name.replace('_', '-')}", type=kind, dest=option.name, help=option.why)


def search_overrides(args, names):
    """The search options `names` as given on the command line ({name: value or None})."""
    return {name: getattr(args, name) for name in names}
