"""provider_specs: lazy dotted-path factories, and the README's plugin registered for real."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from providers_base_acme import load_example, readme_blocks

from portal.core.domain import MachineType
from portal.core.errors import InvalidArgumentError
from portal.core.plugins import Plugins, get_plugin_manager
from portal.core.specs import NoticeSourceContext, SettingSpec
from portal.providers.base.registration import LazyFactory, provider_specs, resolve


@pytest.fixture
def lazy_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module on disk that records being imported."""
    (tmp_path / "lazy_provider_mod.py").write_text(
        "from portal.core.domain import MachineType\n"
        "def types():\n"
        "    return [MachineType(provider='lazy', name='x1', vcpus=1, memory_gib=1.0)]\n"
        "class Source:\n"
        "    @classmethod\n"
        "    def build(cls, context):\n"
        "        return ('built', context)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "lazy_provider_mod"
    sys.modules.pop("lazy_provider_mod", None)


def test_nothing_is_imported_until_a_factory_is_called(lazy_module: str) -> None:
    specs = provider_specs(
        "lazy",
        source=f"{lazy_module}:Source.build",
        catalog=f"{lazy_module}:types",
        source_description="a source",
    )
    assert lazy_module not in sys.modules
    (source,) = specs.sources
    (catalog,) = specs.catalogs
    assert (source.name, source.provider, source.description) == ("lazy", "lazy", "a source")
    context = NoticeSourceContext()
    assert source.factory(context) == ("built", context)  # type: ignore[comparison-overlap]
    assert lazy_module in sys.modules
    assert [t.name for t in catalog.machine_types()] == ["x1"]
    assert isinstance(next(iter(catalog.machine_types())), MachineType)


def test_the_catalog_is_optional() -> None:
    specs = provider_specs("solo", source="json:loads")
    assert specs.catalogs == () and len(specs.sources) == 1


@pytest.mark.parametrize(
    "target", ["json.loads", "json:", ":loads", "json:loads.", "json::loads", "json:a..b", ""]
)
def test_a_malformed_path_is_refused_at_registration(target: str) -> None:
    with pytest.raises(InvalidArgumentError, match="entry point spells it"):
        LazyFactory(target)


def test_resolve_follows_dotted_attributes() -> None:
    assert resolve("os.path:join") is __import__("os").path.join
    assert resolve("portal.core.domain:Notice.derive_id")("p", 1).startswith("p-")


def test_the_readme_plugin_registers_its_source() -> None:
    load_example()
    plugin = types.ModuleType("portal_acme.plugin")
    exec(compile(readme_blocks()[1], "README.md", "exec"), plugin.__dict__)
    pm = get_plugin_manager(autoload=False)
    pm.register(plugin, name="acme")
    spec = Plugins(pm).notice_source("acme")
    source = spec.factory(NoticeSourceContext(settings={"dmi_dir": "/nonexistent"}))
    try:
        assert type(source).__name__ == "AcmeNoticeSource" and source.detect() is False
    finally:
        source.close()


def test_a_providers_settings_are_named_after_it() -> None:
    """A provider's settings sit in its own table ([acme] in config.toml), so their names start
    with the provider's; one that does not is refused at registration, saying so."""
    good = SettingSpec(name="acme.poll_interval_s", parse=float, default=1.0)
    specs = provider_specs("acme", source="acme.notices:AcmeSource", settings=[good])
    assert specs.settings == (good,)
    with pytest.raises(InvalidArgumentError, match=r"must be named acme\.<name>"):
        provider_specs(
            "acme",
            source="acme.notices:AcmeSource",
            settings=[SettingSpec(name="poll_interval_s", parse=float)],
        )


def test_the_sigterm_source_declares_the_settings_it_reads() -> None:
    """The settings the node hands the sources are the ones the plugins declare."""
    settings = Plugins(get_plugin_manager()).settings()
    for name in ("sigterm.grace_s", "sigterm.notices"):
        assert name in settings, sorted(settings)
