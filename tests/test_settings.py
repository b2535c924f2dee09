"""`SearchSettings`: one checked value from a run's `decode` section or from command-line flags."""

import dataclasses

import pytest

from kmt.config import DecodeConfig, validate_decode
from kmt.errors import ConfigError, KmtError
from kmt.inference.settings import SearchSettings


def test_from_config_reads_the_decode_section():
    settings = SearchSettings.from_config(DecodeConfig(beam_size=5, length_penalty=1.0, max_length_b=3))
    assert settings == SearchSettings.of(beam_size=5, length_penalty=1.0, max_length_b=3)
    assert SearchSettings.from_config({"beam_size": 1, "batch_size": 8}) == SearchSettings.of(beam_size=1)
    assert SearchSettings.from_config(DecodeConfig()) == SearchSettings()  # one set of defaults
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.beam_size = 2


def test_replace_takes_the_flags_given_and_keeps_beam_and_sampling_apart():
    sampling = SearchSettings.of(beam_size=1, sampling_topk=0, sampling_topp=0.9)
    assert sampling.replace(beam_size=None, length_penalty=None) == sampling  # no flag given
    assert sampling.replace(beam_size=4) == SearchSettings.of(beam_size=4)  # a beam asked for: no sampling
    assert SearchSettings.of(beam_size=4).replace(sampling_topk=0) == SearchSettings.of(beam_size=1, sampling_topk=0)
    assert sampling.greedy() == SearchSettings.of(beam_size=1)
    with pytest.raises(
        ValueError, match="sampling_topk samples with beam_size=1 only. Received: sampling_topk=0, beam_size=4"
    ):
        SearchSettings().replace(sampling_topk=0, beam_size=4)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(beam_size=0), "beam_size must be >= 1. Received: beam_size=0"),
        (dict(nbest=5), "nbest must be 1 to beam_size. Received: nbest=5, beam_size=4"),
        (dict(beam_size=1, sampling_topk=-1), "sampling_topk must be >= 0. Received: sampling_topk=-1"),
        (dict(beam_size=1, sampling_topk=0, sampling_temperature=0), "sampling_temperature must be positive"),
        (dict(beam_size=1, sampling_topk=0, sampling_topp=1.5), "sampling_topp must be in (0, 1]"),
        (dict(sampling_topp=0.5), "sampling_topp applies to sampling"),
        (dict(max_length=0), "max_length must be >= 1. Received: max_length=0"),
    ],
)
def test_a_bad_value_is_named(changes, message):
    with pytest.raises(KmtError) as error:  # a ValueError too, and one line at the command line
        SearchSettings.of(**changes)
    assert isinstance(error.value, ValueError) and message in str(error.value)


def test_the_config_check_is_the_settings_check():
    with pytest.raises(ConfigError, match=r"^decode.beam_size must be >= 1. Received: beam_size=0$"):
        validate_decode(DecodeConfig(beam_size=0))
