"""`kmt-train`: train a Transformer with model.fit, configured by Hydra (`kmt-train --help`)."""

import logging
import sys

import hydra

from kmt.cli import console_script
from kmt.cli.errors import check_overrides, exit_on_user_error, quiet_tensorflow
from kmt.config import aliased, config_dir, register_configs

logger = logging.getLogger("kmt")

register_configs()


@hydra.main(config_path=config_dir(), config_name="config", version_base="1.3")
def run(cfg):
    from kmt.training import train  # the data and training code load here, after the config is known to be good

    quiet_tensorflow()

    with exit_on_user_error():
        metrics = train(cfg, cfg.output_dir)  # ${hydra:runtime.output_dir}: this job's directory
    # What a sweeper optimises: the validation objective (None on a distributed run's workers but the chief).
    return metrics["val"][cfg.trainer.objective] if metrics and "val" in metrics else None


@console_script
def main():
    sys.argv[1:] = aliased(sys.argv[1:])  # data.train=[...]: several weighted corpora
    check_overrides(sys.argv[1:])
    import keras  # noqa: F401  (the backend, before Hydra's callbacks import it: one line if it is not installed)

    run()


if __name__ == "__main__":
    main()
