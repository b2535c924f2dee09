"""User-facing errors: one clear line, no traceback, non-zero exit.

Anything a user can get wrong (a bad path, mismatched files, a bad config value) raises a subclass of `KmtError`
with a message that names the value received. The CLI entry points catch `KmtError`, print `error: <message>` on
one line to stderr and exit with status 2; every other exception is a bug and keeps its traceback.
"""


class KmtError(Exception):
    """Base class of errors caused by user input rather than by a bug in kmt."""

    exit_code = 2


class ConfigError(KmtError):
    """A config value is missing, of the wrong type, or out of range."""


class DataError(KmtError):
    """A corpus file is missing, unreadable, empty, or does not line up with its pair."""
