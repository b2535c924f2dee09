"""Command-line entry points: thin wrappers that parse arguments and call into kmt.

Every command imports this package first, which turns on the quiet start-up (`kmt._startup.quiet_startup`): a
library user's `import kmt` does not.
"""

import functools
import os
import sys

from kmt._startup import quiet_startup

quiet_startup()


def console_script(main):
    """Wraps a console script's `main` so that a reader that stops early (`kmt-train --help | head`) ends it quietly:
    on `BrokenPipeError`, stdout is pointed at /dev/null, so that nothing is left to flush into the closed pipe, and
    the process exits with status 1, as Python's documentation of SIGPIPE does, with no traceback."""

    @functools.wraps(main)
    def wrapped(*args, **kwargs):
        try:
            try:
                return main(*args, **kwargs)
            finally:  # also after a SystemExit (argparse's --help): what is still buffered meets the pipe here
                if sys.stdout is not None and not sys.stdout.closed:  # kmt-translate closes it when done
                    sys.stdout.flush()
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(1) from None

    return wrapped
