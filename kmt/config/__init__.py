"""kmt's config: the schema Hydra composes `conf/` onto, the rules it must meet, and composing it outside a job.

- `kmt.config.schema`: dataclasses registered in Hydra's ConfigStore, the single source of config names and defaults
  (`Config` and one class per group), and `onto_schema` for a saved run's config.
- `kmt.config.validation`: `validate`, what the schema's types cannot check (ranges, divisibility, combinations),
  and `validated`, the read-only copy a run works from.
- `kmt.config.compose`: `compose_config` (`kmt.compose_config`), `composing` and `config_dir`.

Importing it imports omegaconf, not Hydra (which `composing` imports when first used) nor Keras.
"""

from kmt.config.compose import aliased, compose_config, composing, config_dir
from kmt.config.schema import (
    ACTIVATIONS,
    DATASETS,
    INHERITED,
    MONITORS,
    OBJECTIVES,
    POSITION_LAYOUTS,
    PRECISIONS,
    CleanConfig,
    Config,
    DataConfig,
    DecodeConfig,
    ModelConfig,
    OptimConfig,
    SplitFiles,
    TokenizerConfig,
    TrainCorpus,
    TrainerConfig,
    TrainFiles,
    onto_schema,
    register_configs,
)
from kmt.config.validation import validate, validate_decode, validated

__all__ = [
    "ACTIVATIONS",
    "DATASETS",
    "INHERITED",
    "MONITORS",
    "OBJECTIVES",
    "POSITION_LAYOUTS",
    "PRECISIONS",
    "CleanConfig",
    "Config",
    "DataConfig",
    "DecodeConfig",
    "ModelConfig",
    "OptimConfig",
    "SplitFiles",
    "TokenizerConfig",
    "TrainCorpus",
    "TrainFiles",
    "TrainerConfig",
    "aliased",
    "compose_config",
    "composing",
    "config_dir",
    "onto_schema",
    "register_configs",
    "validate",
    "validate_decode",
    "validated",
]
