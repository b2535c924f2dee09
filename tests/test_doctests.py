"""The `>>>` examples of kmt's docstrings run as doctests and print what they show.

The modules are found, not listed: every module under kmt/ whose source holds an example line not marked
`# doctest: +SKIP`. Each is imported in its own test, so a module whose imports fail fails that test alone; one that
needs a package of an optional extra (kmt-serve's server, CTranslate2) that is not installed is skipped, saying so.
"""

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = {"ctranslate2", "starlette", "uvicorn", "httptools", "uvloop"}  # pyproject.toml's serve and ctranslate2


def has_examples(path):
    return any(
        line.lstrip().startswith(">>>") and "+SKIP" not in line
        for line in path.read_text(encoding="utf-8").splitlines()
    )


MODULES = sorted(
    ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for path in (ROOT / "kmt").rglob("*.py")
    if has_examples(path)
)


def test_the_examples_are_found():
    assert "kmt.schedule" in MODULES and "kmt.layers.attention" in MODULES, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_examples_print_what_they_show(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in OPTIONAL:
            raise
        pytest.skip(f"{name} needs {error.name}, of an optional extra not installed")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted, f"{name} holds `>>>` lines but doctest found no example in its docstrings"
    assert not result.failed, f"{result.failed} of {name}'s {result.attempted} examples failed (printed above)"
