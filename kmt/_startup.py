"""TensorFlow's native start-up lines, kept out of kmt's output.

TensorFlow 2.21 logs through Abseil, and Abseil writes every line logged before `absl::InitializeLog()` to stderr
whatever `TF_CPP_MIN_LOG_LEVEL` says: on a machine without a GPU each process that imports TensorFlow and makes its
first op prints five or six lines ("Could not find cuda drivers", "failed call to cuInit", the CPU-instruction
notice) before any of kmt's own, burying one-line errors and logs under them. `filtered_startup_logs` runs that
start-up with the process's stderr (file descriptor 2, where C++ writes) captured, then writes back every captured
line but those `TF_CPP_MIN_LOG_LEVEL=2` (kmt's default) was meant to hide: TensorFlow's INFO and WARNING lines,
Abseil's notice, the CPU-instruction notice's second line, and the CUDA probe's error, which on a machine without a
GPU driver is no error. Python warnings and every other line, TensorFlow's other errors included, still reach the
user. `TF_CPP_MIN_LOG_LEVEL=0` (or 1) turns the filter off.
"""

import contextlib
import os
import re
import sys
import tempfile

# Abseil's pre-initialization notice, TensorFlow's INFO and WARNING lines (`I0000 <time> <thread> file.cc:N] ...`),
# the CPU-instruction notice's second line, and the CUDA probe's error on a machine without a GPU driver.
_STARTUP_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IW]\d{4} [\d:.]+ +\d+ \S+\.cc:\d+\]"
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags"
    r"|E\d{4} [\d:.]+ +\d+ cuda_platform\.cc:\d+\] failed call to cuInit"
)


@contextlib.contextmanager
def filtered_startup_logs():
    """Captures file descriptor 2 for the block, then writes back the captured lines `_STARTUP_NOISE` does not
    match. Does nothing when `TF_CPP_MIN_LOG_LEVEL` asks for TensorFlow's INFO or WARNING lines, or when there is
    no file descriptor 2."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "").strip() in ("0", "1"):
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines = capture.read().decode("utf-8", errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not _STARTUP_NOISE.match(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()
