"""`kmt-train`: train a Transformer with model.fit, configured by Hydra (`kmt-train --help`)."""

import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402

from kmt.cli import console_script  # noqa: E402
from kmt.config import config_dir  # noqa: E402
from kmt.cli.errors import check_overrides, exit_on_user_error, quiet_tensorflow  # noqa: E402
from kmt.config import register_configs  # noqa: E402

logger = logging.getLogger("kmt")

register_configs()


@hydra.main(config_path=config_dir(), config_name="config", version_base="1.3")
def run(cfg):
    from kmt.training import train  # the data and training code load here, after the config is known to be good

    quiet_tensorflow()

    with exit_on_user_error():
        metrics = train(cfg, HydraConfig.get().runtime.output_dir)
    # What a sweeper optimises: the validation objective (None on a distributed run's workers but the chief).
    return metrics["val"][cfg.trainer.objective] if metrics and "val" in metrics else None


@console_script
def main():
    check_overrides(sys.argv[1:])
    import keras  # noqa: F401  (the backend, before Hydra's callbacks import it: one line if it is not installed)

    run()


if __name__ == "__main__":
    main()
