"""kmt.inference.strategies: each strategy says what it supports, its options are declared once, and the settings
made from flat options (a run's `decode`, the command line) choose the strategy they describe."""

import dataclasses

import pytest

from kmt.cli import export as export_cli
from kmt.cli import translate as translate_cli
from kmt.config import DecodeConfig
from kmt.inference.settings import OPTIONS, SearchSettings
from kmt.inference.strategies import Beam, Greedy, Sampling, SettingsError


def test_flat_options_choose_the_strategy_they_describe():
    assert SearchSettings().strategy == Beam(size=4, length_penalty=0.6)
    assert SearchSettings.of(beam_size=1).strategy == Greedy()
    assert SearchSettings.of(beam_size=1, nbest=1).strategy == Beam(size=1, nbest=1)  # greedy, with the n-best axis
    assert SearchSettings.of(beam_size=1, sampling_topk=0, sampling_topp=0.9).strategy == Sampling(top_p=0.9)
    assert SearchSettings.of(beam_size=3).beam_size == 3 and SearchSettings.of(beam_size=3).sampling_topk == 1
    for settings in (SearchSettings.of(beam_size=5, nbest=2), SearchSettings.of(beam_size=1, sampling_topk=7)):
        assert SearchSettings.of(**settings.options()) == settings  # the flat view round-trips


def test_each_strategy_says_where_it_decodes_and_the_refusal_names_what_can():
    assert all(Greedy().supports(f) for f in ("run", "savedmodel", "ctranslate2", "prefixes", "alignments"))
    assert Beam(size=5).supports("ctranslate2") and not Beam(size=5, nbest=2).supports("ctranslate2")
    assert not Sampling().supports("ctranslate2") and Sampling().supports("prefixes")
    with pytest.raises(SettingsError, match=r"^a CTranslate2 directory cannot decode with Sampling\(.*\); a run "):
        Sampling().require("ctranslate2")


def test_the_config_group_and_the_flags_come_from_the_one_declaration(capsys):
    config = {f.name for f in dataclasses.fields(DecodeConfig)} - {"batch_size"}
    assert config == {o.name for o in OPTIONS if o.config}
    assert SearchSettings.from_config(DecodeConfig()) == SearchSettings()  # the defaults are the settings' own
    for module in (export_cli, translate_cli):
        with pytest.raises(SystemExit):
            module.parse_args(["--help"])
        help_text = "".join(capsys.readouterr().out.split())  # argparse wraps lines, breaking after hyphens too
        for option in (o for o in OPTIONS if o.name in module.SEARCH):
            assert f"--{option.name.replace('_', '-')}" in help_text and "".join(option.why.split()) in help_text


def test_bad_values_are_refused_naming_them():
    with pytest.raises(SettingsError, match="beam_size must be >= 1. Received: beam_size=0"):
        Beam(size=0)
    with pytest.raises(SettingsError, match="sampling_topk=1 is greedy search"):
        Sampling(top_k=1)
    with pytest.raises(SettingsError, match="unknown search options: beam"):
        SearchSettings.of(beam=2)
