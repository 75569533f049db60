"""The plugin author's guide lists every setting as it is registered (Datasette's documentation
tests): Portal's own and every installed plugin's (``portal_settings``), each with its variable
and default. A setting added, renamed or given another variable fails here until
``docs/plugins.md`` says so."""

from __future__ import annotations

import re
from pathlib import Path

from portal.core.plugins import Plugins
from portal.core.settings import CORE_SETTINGS
from portal.core.specs import SettingSpec

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
_ROW = re.compile(r"^\| `([\w.]+)` \| (?:`(\w+)`)? \| ([^|]*) \| [^|]+ \|$", re.MULTILINE)


#: The worked examples in examples/ (installed beside Portal in the integration session): their
#: own READMEs document their settings; the guide's table is Portal's and its bundled plugins'.
_EXAMPLES = "portal-acme-"


def _registered() -> dict[str, SettingSpec]:
    specs = {spec.name: spec for spec in CORE_SETTINGS}
    plugins = Plugins.load()
    examples = {
        row["name"]
        for row in plugins.inventory()
        if row["kind"] == "setting" and row["distribution"].startswith(_EXAMPLES)
    }
    specs.update({n: s for n, s in plugins.settings().items() if n not in examples})
    return specs


def _default(spec: SettingSpec) -> str:
    if spec.default is None:
        return ""
    return str(spec.default).lower() if isinstance(spec.default, bool) else str(spec.default)


def test_every_registered_setting_is_in_the_guide_as_registered() -> None:
    rows = {
        name: (env or None, default.strip())
        for name, env, default in _ROW.findall(GUIDE.read_text(encoding="utf-8"))
    }
    registered = _registered()
    assert any("." in name for name in registered), "no plugin declared a setting"
    for name, spec in registered.items():
        assert name in rows, f"setting {name} is not in {GUIDE.name}'s table of settings"
        assert rows[name] == (spec.env, _default(spec)), (
            f"{GUIDE.name} shows {name} as {rows[name]}; it is registered as "
            f"{(spec.env, _default(spec))}"
        )
    assert sorted(rows) == sorted(registered), "the guide lists a setting nobody registers"
