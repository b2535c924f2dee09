"""The schema holds every default, group options and recipes hold only overrides, and the configuration reference
(docs/reference/configuration.md) is generated from them."""

import importlib.util
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from kmt.config import Config, compose_config, composing
from kmt.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"  # what the wheel ships as kmt/conf
EXPERIMENTS = sorted((CONF / "experiment").glob("*.yaml"))
SCHEMA_GROUPS = ("data", "model", "optim", "trainer")


def composed(*overrides):
    with composing() as compose:
        return compose(list(overrides))


def leaves(node, prefix=""):
    """{dotted key: value} of every scalar a YAML file sets."""
    found = {}
    for key, value in node.items():
        if OmegaConf.is_dict(value):
            found |= leaves(value, f"{prefix}{key}.")
        else:
            found[f"{prefix}{key}"] = value
    return found


def generator():
    spec = importlib.util.spec_from_file_location("gen_config_reference", ROOT / "docs" / "gen_config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kmt_train_with_no_overrides_runs_the_schema_defaults():
    cfg, schema = composed(), OmegaConf.structured(Config)
    for node in (*SCHEMA_GROUPS, "decode"):
        assert OmegaConf.to_container(cfg[node]) == OmegaConf.to_container(schema[node]), node
    assert cfg.seed == schema.seed
    # conf/config.yaml adds only the job's directory, which only a Hydra job resolves (null here); name unresolved
    assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(schema)


def test_the_job_directory_is_hydras_and_a_validated_config_holds_none():
    job = OmegaConf.to_container(OmegaConf.load(CONF / "config.yaml"))  # unresolved: what a Hydra job resolves
    assert job["output_dir"] == "${hydra:runtime.output_dir}"
    assert composed().output_dir is None  # composed outside a Hydra job: nothing resolves it
    assert compose_config("debug=smoke").output_dir is None
    with pytest.raises(ConfigError, match="set hydra.run.dir instead"):
        compose_config("output_dir=elsewhere")


@pytest.mark.parametrize("option", ["data/dates", "model/tiny", "optim/noam", "trainer/default"])
def test_default_options_restate_nothing(option):
    assert not OmegaConf.load(CONF / f"{option}.yaml"), f"conf/{option}.yaml sets values: the schema holds them"


@pytest.mark.parametrize(
    "path",
    [path for group in (*SCHEMA_GROUPS, "debug") for path in sorted((CONF / group).glob("*.yaml"))],
    ids=lambda path: f"{path.parent.name}/{path.stem}",
)
def test_options_set_only_what_differs_from_the_schema(path):
    group = path.parent.name
    defaults = composed() if group == "debug" else composed()[group]  # debug options are `@package _global_`
    restated = {
        key: value
        for key, value in leaves(OmegaConf.load(path)).items()
        if OmegaConf.select(defaults, key, default=KeyError) == value
    }
    assert not restated, f"{group}/{path.name} restates the schema's defaults: {restated}"


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda path: path.stem)
def test_experiments_are_short_global_overrides(path):
    lines = path.read_text().splitlines()
    assert len(lines) <= 40, f"{path.name} has {len(lines)} lines; recipes hold at most 40 (history: docs/experiments/)"
    assert lines[0] == "# @package _global_"


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda path: path.stem)
def test_experiments_restate_nothing_their_groups_set(path):
    recipe = OmegaConf.load(path)
    picks = [
        f"{key.split()[-1].lstrip('/')}={value}"  # `override /model: small` -> model=small
        for item in recipe.pop("defaults", [])
        for key, value in item.items()
    ]
    groups = composed(*picks)  # the groups the recipe picks, without its own values
    restated = {key: value for key, value in leaves(recipe).items() if OmegaConf.select(groups, key) == value}
    assert not restated, f"{path.name} restates what {', '.join(picks) or 'its groups'} already set: {restated}"
    assert composed(f"experiment={path.stem}") != groups  # its values do reach the composed config


def test_every_schema_field_has_a_why():
    reference = generator()
    whys = reference.field_whys(reference.SCHEMA.read_text())
    missing = [f"{cls}.{name}" for (cls, name), why in whys.items() if not why]
    assert not missing, f"fields without a one-line why comment in kmt/config/schema.py: {missing}"
    assert ("OptimConfig", "warmup_steps") in whys


def test_the_configuration_reference_is_current():
    reference = generator()
    page = reference.PAGE.read_text() if reference.PAGE.exists() else ""
    assert page == reference.reference_page(), (
        "docs/reference/configuration.md differs from kmt/config/schema.py and conf/: "
        "run `python docs/gen_config_reference.py`"
    )
    for key in ("`optim.warmup_steps`", "`data.tokenizer.vocab_size`", "`model=big`", "### multi30k_en_de"):
        assert key in page
