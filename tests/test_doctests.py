"""Run every docstring example in the installed moesym package (formulas cannot drift)."""

import doctest
import importlib
import pkgutil

import pytest

import moesym

MODULES = sorted(m.name for m in pkgutil.walk_packages(moesym.__path__, "moesym.")
                 if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
