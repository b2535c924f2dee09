"""One clear line and exit status 2 for user mistakes, in every entry point.

Hydra and OmegaConf report a bad override over several lines plus a hint about HYDRA_FULL_ERROR; kmt composes
the config itself first (`check_overrides`), before Hydra starts and before any data is read, and reports the
first problem on one line. Errors raised while running (`KmtError`: a bad path, mismatched files) get the same
treatment from `exit_on_user_error`; anything else is a bug and keeps its traceback.
"""

import contextlib
import itertools
import logging
import os
import re
import sys
from pathlib import Path

from kmt.errors import KmtError

# Hydra and OmegaConf are imported where the config is checked: kmt-translate and kmt-serve start without them.

# Hydra's own flags, and those that take a value (whose value is not an override).
_FLAGS_WITH_VALUE = {
    "-cn",
    "--config-name",
    "-cp",
    "--config-path",
    "-cd",
    "--config-dir",
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--experimental-rerun",
    "--info",
    "-i",
}
_INFO_FLAGS = {"-h", "--help", "--hydra-help", "--version", "--shell-completion", "-sc", "--resolve"}
_NOISE = ("To append to your config", "object_type=", "reference_type=", "Set the environment variable", "See https://")
_MAX_SWEEP_JOBS_CHECKED = 256
# The Hydra plugins behind the launchers and the sweeper (docs/scaling.md): the config each registers, its package,
# and kmt's extra that installs it.
_PLUGINS = {
    "joblib": ("hydra-joblib-launcher", "sweep"),
    "submitit_local": ("hydra-submitit-launcher", "sweep"),
    "submitit_slurm": ("hydra-submitit-launcher", "sweep"),
    "optuna": ("hydra-optuna-sweeper", "sweep"),
    "ray": ("hydra-ray-launcher", "ray"),
    "ray_aws": ("hydra-ray-launcher", "ray"),
}
_MISSING = re.compile(r"Could not (?:find|load) '(hydra/(?:launcher|sweeper)/(\w+))'")
_ASKED = re.compile(r"In '(hydra/(?:launcher|sweeper)/\w+)'")


def fail(message, exit_code=2):
    """Prints `error: <message>` as one line on stderr and exits with `exit_code` (2: a user mistake)."""
    print(f"error: {' '.join(str(message).split())}", file=sys.stderr)
    raise SystemExit(exit_code)


def one_line(error):
    """Hydra's and OmegaConf's multi-line messages squeezed into one informative line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    cause = error.__cause__
    if cause is not None and str(cause).strip() and str(cause).strip().splitlines()[0] not in lines:
        lines += [line.strip() for line in str(cause).splitlines() if line.strip()]
    if "Config search path:" in lines:  # what follows lists Hydra's internals
        lines = lines[: lines.index("Config search path:")]
    lines = [line.rstrip(".:;") for line in lines if not line.startswith(_NOISE)]
    return "; ".join(lines).replace("Available options in", "available options in")


def missing_plugin(error):
    """The one line for a launcher or sweeper whose Hydra plugin is not installed (Hydra only says it cannot find
    the config the plugin registers), or None for any other error."""
    missing = _MISSING.search(str(error))
    if missing is None or missing[2] not in _PLUGINS:
        return None
    asked = _ASKED.search(str(error))
    package, extra = _PLUGINS[missing[2]]
    choice = "=".join((asked or missing)[1].rsplit("/", 1))
    return f'{choice} needs the Hydra plugin {package}, which is not installed: pip install "kmt[{extra}]"'


def quiet_tensorflow():
    """Keeps TensorFlow's and absl's INFO chatter (SavedModel internals, asset paths) out of kmt's logs."""
    for name in ("absl", "tensorflow"):
        logging.getLogger(name).setLevel(logging.WARNING)


@contextlib.contextmanager
def exit_on_user_error():
    try:
        yield
    except KmtError as error:
        fail(error, error.exit_code)


def _overrides(argv):
    if any(arg in _INFO_FLAGS or arg.startswith("--info") for arg in argv):
        return None
    overrides, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _FLAGS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            overrides.append(arg)
    return overrides


def _choices(override):
    """The values one override stands for: its own, a sweep's each, or an interval's ends (Optuna's
    `interval(lo, hi)`, whose values are drawn while the search runs)."""
    from hydra.core.override_parser.types import IntervalSweep

    if not override.is_sweep_override():
        return [override.input_line]
    sweep = override.value()
    values = [sweep.start, sweep.end] if isinstance(sweep, IntervalSweep) else override.sweep_string_iterator()
    return [f"{override.get_key_element()}={value}" for value in values]


def _jobs(overrides):
    """Every job of a sweep (`a=1,2 b=3,4` -> 4 override lists); one job when nothing sweeps."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return itertools.islice(itertools.product(*map(_choices, parsed)), _MAX_SWEEP_JOBS_CHECKED)


def _user_config_dir(argv):
    """The directory `--config-dir DIR` (or `-cd DIR`, `--config-dir=DIR`) adds to the search path, or None."""
    for i, arg in enumerate(argv):
        if arg in ("-cd", "--config-dir") and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--config-dir="):
            return arg.split("=", 1)[1]
    return None


def check_overrides(argv):
    """Composes the config for each job the command line asks for and validates it; exits on the first problem.

    A user's `--config-dir` joins the search path where Hydra puts it (after kmt's), as `hydra.searchpath`."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from kmt.config import composing, validate

    overrides = _overrides(argv)
    if overrides is None:
        return
    user_dir = _user_config_dir(argv)
    if user_dir is not None and not os.path.isdir(user_dir):
        fail(f"--config-dir {user_dir}: no such directory")
    try:
        with composing(user_dir) as compose:
            for job in _jobs(overrides):
                validate(compose(list(job)))
            first = list(next(_jobs(overrides)))
            cfg = compose(first, return_hydra_config=True)
            for param in _search_space(cfg):  # a search file's (hparams_search): each value with the rest as given
                for value in _choices(param):
                    validate(compose([*first, value]))
            _check_output_dir(
                cfg, multirun=bool({"-m", "--multirun"} & set(argv)) or str(cfg.hydra.mode).endswith("MULTIRUN")
            )
    except (HydraException, OmegaConfBaseException) as error:
        fail(missing_plugin(error) or one_line(error))
    except KmtError as error:
        fail(error)


def _search_space(cfg):
    """The sweeper's `hydra.sweeper.params` (the Optuna sweeper's search space), parsed as overrides."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    return OverridesParser.create().parse_overrides([f"{key}={value}" for key, value in params.items()])


def _check_output_dir(cfg, multirun):
    """A run (or sweep) directory that cannot be made is one line here, not Hydra's traceback when it makes it."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        setting = "hydra.sweep.dir" if multirun else "hydra.run.dir"
        directory = OmegaConf.select(cfg, setting, throw_on_resolution_failure=True)
    except OmegaConfBaseException:  # it names something only Hydra's run knows; Hydra makes it then
        return
    check_creatable(directory, setting)


def check_creatable(directory, setting="hydra.run.dir"):
    """Raises `KmtError` when `directory` (the value of `setting`) cannot be made (a path under a regular file, a
    parent without write permission), without making anything."""
    directory = Path(directory).absolute()
    existing = directory
    while not existing.exists():
        existing = existing.parent
    if existing == directory and directory.is_dir():
        return
    if not existing.is_dir():
        raise KmtError(f"cannot create {directory}: {existing} is a file, not a directory; choose another {setting}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise KmtError(f"cannot create {directory}: no permission to write in {existing}; choose another {setting}")
