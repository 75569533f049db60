"""The plugin author's guide names every hook as it is (Datasette's documentation tests): a hook
added, renamed or given a parameter fails here until ``docs/plugins.md`` says so."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from portal.core import hookspecs

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "plugins.md"
HOOKS = sorted(
    name
    for name, value in vars(hookspecs).items()
    if name.startswith("portal_") and inspect.isfunction(value)
)


def _documented() -> dict[str, str]:
    """``hook name -> its parameters`` as the guide's table writes them."""
    if not GUIDE.is_file():
        pytest.skip(f"{GUIDE} is not in this checkout (an installed package's tests)")
    rows = re.findall(r"^\| `(portal_\w+)\(([^)]*)\)` \|", GUIDE.read_text(), re.MULTILINE)
    return {name: params.replace(" ", "") for name, params in rows}


def test_every_hook_is_in_the_guide_with_its_parameters() -> None:
    documented = _documented()
    assert HOOKS, "no hook found in portal.core.hookspecs"
    for name in HOOKS:
        params = ",".join(inspect.signature(getattr(hookspecs, name)).parameters)
        assert name in documented, f"{name} is not in {GUIDE.name}'s table of hooks"
        assert documented[name] == params, (
            f"{GUIDE.name} shows {name}({documented[name]}); the hook is {name}({params})"
        )


def test_the_guide_names_no_hook_that_does_not_exist() -> None:
    assert sorted(_documented()) == HOOKS
