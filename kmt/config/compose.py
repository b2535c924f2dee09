"""Composition: Hydra composing kmt's `conf/` onto the schema, outside `kmt-train`'s own `@hydra.main`.

`compose_config` is the public face (`kmt.compose_config`); `composing` is what kmt's commands and tests use to
compose several configs under one Hydra initialization; `config_dir` finds `conf/` in a checkout or a wheel.
"""

import contextlib
import os
import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from kmt.config.schema import register_configs
from kmt.config.validation import validated
from kmt.errors import ConfigError


def config_dir() -> str:
    """The directory that holds `config.yaml` and its groups, as a string (what Hydra takes).

    An installed wheel has it as package data at `kmt/conf`; a checkout, and an editable install of one, keeps it
    at the top of the repository beside `kmt/`, so an edited `conf/*.yaml` takes effect without reinstalling."""
    package = Path(__file__).resolve().parents[1]  # kmt/
    shipped = package / "conf"
    return str(shipped if shipped.is_dir() else package.parent / "conf")


_TRAIN_LIST = re.compile(r"(\+{0,2})data\.train=(\s*\[.*)", re.DOTALL)


def aliased(overrides):
    """The overrides with `data.train=[...]` (a list of weighted corpora, as users of OpenNMT-tf's and Marian's
    training lists write it) spelled `data.train_corpora=[...]`, the key that holds it: `data.train` itself holds one
    corpus's `source` and `target`, and OmegaConf cannot merge a list onto that mapping."""
    matches = [_TRAIN_LIST.fullmatch(override) for override in overrides]
    return [f"{m[1]}data.train_corpora={m[2]}" if m else override for m, override in zip(matches, overrides)]


@contextlib.contextmanager
def composing(user_dir=None):
    """Hydra initialized on kmt's configs (and a user's directory on top, as `--config-dir` adds it); yields
    `compose(overrides, **options)`. The one place configs are composed outside `kmt-train`'s own `@hydra.main`."""
    from hydra import compose, initialize_config_dir

    register_configs()
    extra = [f"hydra.searchpath=['file://{os.path.abspath(user_dir)}']"] if user_dir is not None else []

    def composed(overrides, **options):
        cfg = compose("config", overrides=[*extra, *aliased(overrides)], **options)
        if OmegaConf.is_interpolation(cfg, "output_dir"):  # ${hydra:runtime.output_dir}: no Hydra job resolves it here
            cfg.output_dir = None
        return cfg

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        yield composed


def compose_config(*overrides: str, config_dir: str | os.PathLike | None = None) -> DictConfig:
    """The config `kmt-train OVERRIDES...` would run with, composed from kmt's `conf/` and validated.

    Args:
        *overrides: str. Hydra overrides, as on the command line (`"experiment=multi30k_en_de"`, `"debug=smoke"`,
            `"trainer.epochs=3"`).
        config_dir: str or path. A directory of your own config files composed on top of kmt's (what `kmt-train
            --config-dir DIR` adds). Defaults to `None`.

    Example:
    >>> cfg = compose_config("debug=smoke", "trainer.epochs=2")
    >>> cfg.trainer.epochs, cfg.data.name
    (2, 'dates')
    """
    if config_dir is not None and not os.path.isdir(config_dir):
        raise ConfigError(f"config_dir={config_dir}: no such directory")
    with composing(config_dir) as compose:
        cfg = compose(list(overrides))
    return validated(cfg)
