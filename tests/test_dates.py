"""Tests of kmt.data.dates: the generated human-date -> ISO-date dataset."""

import datetime
import re

import pytest

from kmt.data.dates import DATE_FORMATS, date_splits, generate_date_pairs, ordinal
from kmt.errors import ConfigError

# An independent reading of the sources: English names, written out here rather than imported.
MONTH_NUMBERS = {
    name: number
    for number, full in enumerate(
        "january february march april may june july august september october november december".split(), start=1
    )
    for name in (full, full[:3])
}
WEEKDAY_NUMBERS = {
    name: number
    for number, full in enumerate("monday tuesday wednesday thursday friday saturday sunday".split())
    for name in (full, full[:3])
}
SUFFIXES = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}  # every other day takes "th"


@pytest.fixture(scope="module")
def pairs():
    return generate_date_pairs(3000, seed=7)


def parse(source):
    """Read (year, month, day, weekday or None, ordinal suffix or None) back from a source string."""
    words = re.findall(r"[a-z]+|\d+(?:st|nd|rd|th)?", source.lower())
    numbers = [word for word in words if word[0].isdigit()]
    years = [n for n in numbers if re.fullmatch(r"\d{4}", n)]
    days = [n for n in numbers if n not in years]
    months = [MONTH_NUMBERS[w] for w in words if w in MONTH_NUMBERS]
    weekdays = [WEEKDAY_NUMBERS[w] for w in words if w in WEEKDAY_NUMBERS]
    assert len(years) == len(days) == len(months) == 1, source
    assert len(weekdays) <= 1, source
    day = re.fullmatch(r"(\d+)(st|nd|rd|th)?", days[0])
    return int(years[0]), months[0], int(day.group(1)), (weekdays or [None])[0], day.group(2)


def shape(source):
    """A source's format with the values blanked out, e.g. "Tue, 05 Mar 1996" -> "a, 9 a 9"."""
    kept = {"the", "of"}
    words = re.sub(r"(?<=\d)(st|nd|rd|th)", "TH", source.lower())
    return re.sub(r"\d+", "9", re.sub(r"[a-z]+", lambda m: m.group() if m.group() in kept else "a", words))


def test_same_seed_same_pairs_other_seed_other_pairs():
    assert generate_date_pairs(200, seed=3) == generate_date_pairs(200, seed=3)
    assert generate_date_pairs(200, seed=3) != generate_date_pairs(200, seed=4)


def test_targets_are_iso_dates_in_range(pairs):
    for _, target in pairs:
        date = datetime.date.fromisoformat(target)
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", target)
        assert datetime.date(1900, 1, 1) <= date <= datetime.date(2099, 12, 31)
    years = [int(target[:4]) for _, target in pairs]
    assert min(years) < 1920 and max(years) > 2080  # spread over the whole range


def test_source_read_back_independently_agrees_with_target(pairs):
    for source, target in pairs:
        year, month, day, _, _ = parse(source)
        assert datetime.date(year, month, day) == datetime.date.fromisoformat(target), source


def test_weekday_where_shown_is_that_of_the_date(pairs):
    shown = 0
    for source, target in pairs:
        weekday = parse(source)[3]
        if weekday is not None:
            shown += 1
            assert weekday == datetime.date.fromisoformat(target).weekday(), source
    assert shown > 300


def test_ordinal_suffixes_are_correct(pairs):
    assert [ordinal(d) for d in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "23rd",
        "31st",
    ]
    seen = set()
    for source, _ in pairs:
        _, _, day, _, suffix = parse(source)
        if suffix is not None:
            seen.add(day)
            assert suffix == SUFFIXES.get(day, "th"), source
    assert seen == set(range(1, 32))


def test_many_formats_and_all_cases_appear(pairs):
    assert 12 <= len(DATE_FORMATS) <= 20
    assert all("{month}" in f or "{mon}" in f for f in DATE_FORMATS)
    assert len({shape(source) for source, _ in pairs}) >= 12
    letters = ["".join(re.findall(r"[A-Za-z]+", source)) for source, _ in pairs]
    assert any(w.islower() for w in letters) and any(w.isupper() for w in letters)
    assert any(not w.islower() and not w.isupper() for w in letters)


def test_numeric_only_formats_are_absent(pairs):
    assert all(re.search(r"[A-Za-z]{3}", source) for source, _ in pairs)


def test_splits_sizes_disjoint_and_deterministic():
    splits = date_splits(num_train=3000, num_val=300, num_test=300, seed=11)
    assert {name: len(s) for name, (s, _) in splits.items()} == {"train": 3000, "val": 300, "test": 300}
    assert all(len(sources) == len(targets) for sources, targets in splits.values())
    sets = {name: set(sources) for name, (sources, _) in splits.items()}
    assert sum(len(s) for s in sets.values()) == 3600  # unique within and across splits
    assert splits == date_splits(num_train=3000, num_val=300, num_test=300, seed=11)
    assert splits["val"] != date_splits(num_train=3000, num_val=300, num_test=300, seed=12)["val"]


def test_held_out_splits_do_not_depend_on_train_size():
    small, large = date_splits(100, 50, 50, seed=5), date_splits(2000, 50, 50, seed=5)
    assert small["val"] == large["val"] and small["test"] == large["test"]


@pytest.mark.parametrize("bad", [-1, 2.5, "10", True])
def test_bad_counts_are_config_errors_naming_the_value(bad):
    with pytest.raises(ConfigError, match=re.escape(repr(bad))):
        date_splits(bad, 10, 10, seed=0)
    with pytest.raises(ConfigError, match="num_pairs"):
        generate_date_pairs(bad, seed=0)
