"""The plugin manager: entry points, block lists, duplicates, broken plugins."""

from __future__ import annotations

import logging
import textwrap
from importlib import metadata
from pathlib import Path

import pluggy
import pytest

from portal.core.errors import PluginError
from portal.core.hookspecs import hookimpl
from portal.core.plugins import (
    DISABLE_AUTOLOAD_ENV,
    DISABLED_PLUGINS_ENV,
    Plugins,
    get_plugin_manager,
)
from portal.core.specs import NoticeSourceSpec, SerializerSpec, StorageBackendSpec


class _FakeSourcePlugin:
    def __init__(self, name: str) -> None:
        self.name = name

    @hookimpl
    def portal_notice_sources(self) -> list[NoticeSourceSpec]:
        return [NoticeSourceSpec(name=self.name, provider="fake", factory=lambda ctx: None)]  # type: ignore[arg-type,return-value]


def test_core_alone_registers_no_plugin(plugins: Plugins) -> None:
    """Core is hook specs and types: every source, even Portal's own, is a plugin of its own
    distribution (portal-providers-base registers ``local`` and ``sigterm``)."""
    assert plugins.notice_sources() == {}
    assert plugins.load_failures == []


def test_no_manager_is_created_at_import() -> None:
    import portal.core.plugins as mod

    assert not [v for v in vars(mod).values() if isinstance(v, pluggy.PluginManager)]


def test_duplicate_names_are_refused_naming_both(pm: pluggy.PluginManager) -> None:
    pm.register(_FakeSourcePlugin("acme"), name="acme-one")
    pm.register(_FakeSourcePlugin("ACME"), name="acme-two")
    with pytest.raises(PluginError, match="two plugins register the notice source 'ACME'") as info:
        Plugins(pm).notice_sources()
    assert "acme-one" in str(info.value) and "acme-two" in str(info.value)
    assert info.value.code == "PLUGIN_ERROR"


def test_unknown_hook_argument_is_a_clear_error() -> None:
    class Bad:
        @hookimpl
        def portal_notice_sources(self, region: str) -> list[NoticeSourceSpec]:
            return []

    pm = get_plugin_manager(autoload=False)
    from portal.core.plugins import _register

    with pytest.raises(PluginError, match="may take only the arguments its spec names"):
        _register(pm, Bad(), "bad")


def test_wrong_spec_type_is_refused(pm: pluggy.PluginManager) -> None:
    class Wrong:
        @hookimpl
        def portal_serializers(self) -> list[object]:
            return [StorageBackendSpec(name="x", schemes=("x",), factory=lambda u, o: None)]  # type: ignore[arg-type,return-value]

    pm.register(Wrong(), name="wrong")
    with pytest.raises(PluginError, match="returned StorageBackendSpec from portal_serializers"):
        Plugins(pm).serializers()


def test_failing_hook_names_the_plugin(pm: pluggy.PluginManager) -> None:
    class Boom:
        @hookimpl
        def portal_serializers(self) -> list[SerializerSpec]:
            raise RuntimeError("kaput")

    pm.register(Boom(), name="boom")
    with pytest.raises(
        PluginError, match="plugin 'boom' failed in portal_serializers: RuntimeError: kaput"
    ):
        Plugins(pm).serializers()


def test_lookup_errors_list_what_is_installed(pm: pluggy.PluginManager) -> None:
    pm.register(_FakeSourcePlugin("local"), name="fake-local")
    plugins = Plugins(pm)
    with pytest.raises(PluginError, match="no notice source named 'nope'; installed: local"):
        plugins.notice_source("nope")
    assert plugins.notice_source("LOCAL").name == "local"


def test_storage_backend_for_unknown_scheme(plugins: Plugins) -> None:
    with pytest.raises(PluginError, match=r"no storage backend handles zzz://.*portal-storage"):
        plugins.storage_backend_for("zzz://bucket/x")


def test_event_observers_are_isolated(
    pm: pluggy.PluginManager, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[object] = []

    class Good:
        @hookimpl
        def portal_event(self, event: object) -> None:
            seen.append(event)

    class Broken:
        @hookimpl
        def portal_event(self, event: object) -> None:
            raise RuntimeError("observer down")

    pm.register(Good(), name="good")
    pm.register(Broken(), name="broken")
    with caplog.at_level(logging.ERROR, logger="portal.plugins"):
        Plugins(pm).emit("evt")
    assert seen == ["evt"]
    assert "broken" in caplog.text


def test_key_store_first_result_wins(pm: pluggy.PluginManager) -> None:
    class Kms:
        @hookimpl
        def portal_key_store(self, home: str) -> object:
            return ("kms", home)

    assert Plugins(pm).key_store("/h") is None
    pm.register(Kms(), name="kms")
    assert Plugins(pm).key_store("/h") == ("kms", "/h")


# --- entry points: a real distribution on sys.path ------------------------------------------


def _make_dist(tmp_path: Path, name: str, module_source: str, ep_name: str) -> None:
    """A minimal installed distribution (a .dist-info with entry_points.txt) on sys.path."""
    pkg = name.replace("-", "_")
    (tmp_path / f"{pkg}.py").write_text(textwrap.dedent(module_source))
    info = tmp_path / f"{pkg}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[portal]\n{ep_name} = {pkg}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    metadata.distributions.cache_clear() if hasattr(metadata.distributions, "cache_clear") else None
    return tmp_path


GOOD = """
from portal.core.hookspecs import hookimpl
from portal.core.specs import NoticeSourceSpec

@hookimpl
def portal_notice_sources():
    return [NoticeSourceSpec(name="acme", provider="acme", factory=lambda ctx: None)]
"""


def test_entry_point_plugins_load(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _make_dist(site, "portal-acme-test", GOOD, "acme")
    monkeypatch.delenv(DISABLE_AUTOLOAD_ENV, raising=False)
    plugins = Plugins.load()
    assert "acme" in plugins.notice_sources()
    assert plugins.distribution_of("acme") == "portal-acme-test"
    # Who shipped it, which version, which hooks: what a bug report about a plugin needs.
    (acme,) = [p for p in plugins.plugins() if p["name"] == "acme"]
    assert acme == {
        "name": "acme",
        "distribution": "portal-acme-test",
        "version": "1.0",
        "hooks": ["portal_notice_sources"],
    }


def test_autoload_can_be_disabled(site: Path) -> None:
    _make_dist(site, "portal-acme-test", GOOD, "acme")
    pm = get_plugin_manager(environ={DISABLE_AUTOLOAD_ENV: "1"})
    assert "acme" not in Plugins(pm).notice_sources()
    pm = get_plugin_manager(environ={DISABLE_AUTOLOAD_ENV: "0"})
    assert "acme" in Plugins(pm).notice_sources()


def test_block_list_skips_an_entry_point(site: Path) -> None:
    _make_dist(site, "portal-acme-test", GOOD, "acme")
    pm = get_plugin_manager(environ={DISABLED_PLUGINS_ENV: "ACME"})
    assert "acme" not in Plugins(pm).notice_sources()


TYPO = """
from portal.core.hookspecs import hookimpl

@hookimpl
def portal_notice_source():  # missing "s"
    return []
"""


def test_unknown_hook_name_is_a_clear_error(site: Path) -> None:
    _make_dist(site, "portal-typo-test", TYPO, "typo")
    with pytest.raises(PluginError, match=r"portal_notice_source.*Portal's hooks are named"):
        get_plugin_manager(environ={})


def test_broken_plugin_is_reported_not_fatal(site: Path, caplog: pytest.LogCaptureFixture) -> None:
    _make_dist(site, "portal-broken-test", "import no_such_module_xyz\n", "broken")
    _make_dist(site, "portal-acme-test", GOOD, "acme")
    with caplog.at_level(logging.WARNING, logger="portal.plugins"):
        plugins = Plugins(get_plugin_manager(environ={}))
    (failure,) = plugins.load_failures
    assert failure.distribution == "portal-broken-test"
    assert failure.entry_point == "broken"
    assert "ModuleNotFoundError" in failure.error and "no_such_module_xyz" in failure.error
    assert "portal-broken-test" in caplog.text and "PORTAL_DISABLE_PLUGINS=broken" in caplog.text
    assert "acme" in plugins.notice_sources()  # the host goes on with the others
