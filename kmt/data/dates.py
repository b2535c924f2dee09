"""The default dataset, generated on the fly: human-readable dates -> ISO dates (`YYYY-MM-DD`).

Why this dataset: it needs no network and no files, a hundred thousand pairs are generated in about a second, and a
small Transformer learns it to more than 95% exact match in minutes on a CPU, so the whole train -> export ->
translate path can be exercised anywhere. It is still a real sequence-to-sequence task: the model must find the
year, month and day wherever the source format puts them ("the 5th of March 1996", "1996 March 5",
"Tue, 05 Mar 1996"), turn a month name into its number and reorder the fields, which a model without attention
(or with a broken mask) cannot do.

Every format names the month (full or three-letter, in Title, lower or UPPER case), so no source is ambiguous:
purely numeric forms such as "5.3.1996" are left out on purpose. Weekdays, where shown, are those of the date.

Example:

>>> generate_date_pairs(2, seed=0)
[('1st April, 2038', '2038-04-01'), ('1992-nov-30', '1992-11-30')]
"""

import datetime
import random

from kmt.errors import ConfigError

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

FIRST_DATE = datetime.date(1900, 1, 1)
LAST_DATE = datetime.date(2099, 12, 31)

# Fields: {weekday} "Tuesday", {wkd} "Tue", {month} "March", {mon} "Mar", {day} "5", {day2} "05", {ord} "5th",
# {year} "1996". Each template is rendered in Title case as written, then in lower or UPPER case at random.
DATE_FORMATS = (
    "{weekday}, {month} {day}, {year}",  # Tuesday, March 5, 1996
    "{day} {month} {year}",  # 5 March 1996
    "{month} {ord}, {year}",  # March 5th, 1996
    "{day2} {mon} {year}",  # 05 Mar 1996
    "{mon}. {day}, {year}",  # Mar. 5, 1996
    "the {ord} of {month} {year}",  # the 5th of March 1996
    "{weekday} {day} {month} {year}",  # Tuesday 5 March 1996
    "{month} {day} {year}",  # March 5 1996
    "{year} {month} {day}",  # 1996 March 5
    "{wkd}, {day2} {mon} {year}",  # Tue, 05 Mar 1996
    "{day}-{mon}-{year}",  # 5-Mar-1996
    "{month} {day2}, {year}",  # March 05, 1996
    "{wkd} {ord} {mon} {year}",  # Tue 5th Mar 1996
    "{ord} {month}, {year}",  # 5th March, 1996
    "{month} the {ord}, {year}",  # March the 5th, 1996
    "{weekday} the {ord} of {month}, {year}",  # Tuesday the 5th of March, 1996
    "{year}-{mon}-{day2}",  # 1996-Mar-05
)
_CASES = (str, str.lower, str.upper)  # str keeps the template's Title case

# Generating this many candidates per requested unique source without success means the request cannot be met.
_MAX_TRIES_PER_PAIR = 20


def ordinal(day: int) -> str:
    """Return `day` with its English ordinal suffix: 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 22nd, 31st."""
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def format_date(date: datetime.date, template: str) -> str:
    """Render `date` with one of `DATE_FORMATS` (Title case).

    Args:
        date: the date to render.
        template: a `str.format` template using the fields listed above `DATE_FORMATS`.
    """
    month, weekday = MONTHS[date.month - 1], WEEKDAYS[date.weekday()]
    return template.format(
        weekday=weekday,
        wkd=weekday[:3],
        month=month,
        mon=month[:3],
        day=date.day,
        day2=f"{date.day:02d}",
        ord=ordinal(date.day),
        year=date.year,
    )


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be a non-negative integer. Received: {name}={value!r}")


def _random_pair(rng: random.Random) -> tuple[str, str]:
    """Draw one date uniformly from FIRST_DATE..LAST_DATE, a format and a case; return (source, target)."""
    date = datetime.date.fromordinal(rng.randint(FIRST_DATE.toordinal(), LAST_DATE.toordinal()))
    template, case = rng.choice(DATE_FORMATS), rng.choice(_CASES)
    return case(format_date(date, template)), date.isoformat()


def generate_date_pairs(num_pairs: int, seed: int) -> list[tuple[str, str]]:
    """Generate `(human-readable date, ISO date)` pairs; the same seed always gives the same pairs.

    Sources may repeat (a date drawn twice in the same format and case); use `date_splits` for unique sources.

    Args:
        num_pairs: how many pairs to generate.
        seed: seed of the `random.Random` that draws dates, formats and cases.

    Returns:
        A list of `num_pairs` tuples such as `("Tuesday, March 5, 1996", "1996-03-05")`.
    """
    _check_count("num_pairs", num_pairs)
    rng = random.Random(seed)
    return [_random_pair(rng) for _ in range(num_pairs)]


def date_splits(num_train: int, num_val: int, num_test: int, seed: int) -> dict[str, tuple[list[str], list[str]]]:
    """Generate train/val/test splits whose source strings are unique, so no source appears in two splits.

    Pairs are drawn from one seeded stream and duplicates skipped; val is filled first, then test, then train, so
    the val and test sets of a seed do not change when only `num_train` changes.

    Args:
        num_train: number of training pairs.
        num_val: number of validation pairs.
        num_test: number of test pairs.
        seed: seed of the generator.

    Returns:
        `{"train": (sources, targets), "val": (sources, targets), "test": (sources, targets)}`.
    """
    sizes = {"val": num_val, "test": num_test, "train": num_train}
    for name, size in sizes.items():
        _check_count(f"num_{name}", size)
    total = sum(sizes.values())
    rng = random.Random(seed)
    seen: set[str] = set()
    pairs: list[tuple[str, str]] = []
    for _ in range(_MAX_TRIES_PER_PAIR * total):
        if len(pairs) == total:
            break
        source, target = _random_pair(rng)
        if source not in seen:
            seen.add(source)
            pairs.append((source, target))
    if len(pairs) < total:
        raise ConfigError(
            f"could not generate {total} distinct date pairs (found {len(pairs)}). "
            f"Received: num_train={num_train}, num_val={num_val}, num_test={num_test}"
        )
    splits, start = {}, 0
    for name, size in sizes.items():
        chunk = pairs[start : start + size]
        splits[name] = ([s for s, _ in chunk], [t for _, t in chunk])
        start += size
    return {name: splits[name] for name in ("train", "val", "test")}
