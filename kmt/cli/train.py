"""`kmt-train`: train a Transformer with model.fit, configured by Hydra (`kmt-train --help`)."""

import logging
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402

from kmt.cli.errors import check_overrides, exit_on_user_error, quiet_tensorflow  # noqa: E402
from kmt.config import register_configs  # noqa: E402

CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "conf")
logger = logging.getLogger("kmt")

register_configs()


@hydra.main(config_path=CONFIG_DIR, config_name="config", version_base="1.3")
def run(cfg):
    from kmt.training import train  # the data and training code load here, after the config is known to be good

    quiet_tensorflow()

    with exit_on_user_error():
        return train(cfg, HydraConfig.get().runtime.output_dir)


def main():
    check_overrides(CONFIG_DIR, "config", sys.argv[1:])
    run()


if __name__ == "__main__":
    main()
