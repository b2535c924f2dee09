"""`kmt-prepare`: encode a corpus once into token-id shards that `kmt-train data=prepared data.path=DIR` trains from
(fairseq-preprocess's job). It composes the same config as kmt-train (`kmt-prepare --help`)."""

import logging
import sys

import hydra
from omegaconf import OmegaConf

from kmt.cli import console_script
from kmt.cli.errors import check_overrides, exit_on_user_error
from kmt.config import aliased, config_dir, register_configs

logger = logging.getLogger("kmt")

register_configs()
# Where a preparation goes unless hydra.run.dir says otherwise: beside runs, one directory a corpus and time.
RUN_DIR = "hydra.run.dir=runs/prepared/${name}/${now:%Y-%m-%d_%H-%M-%S}"


@hydra.main(config_path=config_dir(), config_name="config", version_base="1.3")
def run(cfg):
    from kmt.config import validated
    from kmt.data.prepared import prepare_data
    from kmt.errors import ConfigError

    with exit_on_user_error():
        directory = cfg.output_dir  # ${hydra:runtime.output_dir}: this job's directory
        cfg = validated(cfg)
        if cfg.data.name == "prepared":
            raise ConfigError("kmt-prepare reads a corpus: data=prepared is what kmt-train reads its output with")
        data = prepare_data(cfg.data, cfg.model, directory, OmegaConf.to_yaml(cfg, resolve=True))
        meta = data.meta
        sizes = sum(path.stat().st_size for path in data.directory.iterdir() if path.suffix in (".ids", ".npy"))
        pairs = ", ".join(f"{name} {entry['pairs']:,}" for name, entry in meta["splits"].items())
        logger.info(
            "prepared %s pairs in %.1f s: %.1f MiB of ids and index in %s",
            pairs,
            meta["seconds"],
            sizes / 2**20,
            directory,
        )
        logger.info("train from it: kmt-train data=prepared data.path=%s", directory)


@console_script
def main():
    argv = aliased(sys.argv[1:])  # data.train=[...]: several weighted corpora
    extra = ["hydra/help=kmt_prepare"]
    if not any(arg.startswith(("hydra.run.dir=", "++hydra.run.dir=")) for arg in argv):
        extra.append(RUN_DIR)
    check_overrides([*argv, *extra[1:]])
    sys.argv = [sys.argv[0], *argv, *extra]
    run()


if __name__ == "__main__":
    main()
