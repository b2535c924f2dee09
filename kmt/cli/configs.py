"""Where kmt's Hydra configs live: `conf/` at the top of a checkout, shipped inside the wheel as `kmt/conf`."""

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]


def config_dir():
    """The directory that holds `config.yaml` and its groups, as a string (what Hydra takes).

    An installed wheel has it as package data at `kmt/conf`; a checkout, and an editable install of one, keeps it
    at the top of the repository beside `kmt/`, so an edited `conf/*.yaml` takes effect without reinstalling. A
    user's own directory composes on top with Hydra's `--config-dir`."""
    shipped = _PACKAGE / "conf"
    return str(shipped if shipped.is_dir() else _PACKAGE.parent / "conf")
