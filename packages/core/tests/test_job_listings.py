"""``portal_job_listings``: other tools' jobs beside Portal's, from every plugin that lists some;
a plugin that fails or answers with something else lists nothing, and never hides the others."""

from __future__ import annotations

import logging
from typing import Any

import pluggy
import pytest

from portal.core.hookspecs import hookimpl
from portal.core.plugins import Plugins


class _Lists:
    @hookimpl
    def portal_job_listings(self, home: str) -> list[dict[str, Any]]:
        return [{"job": "r-1", "source": "acme", "home": home}]


class _Fails:
    @hookimpl
    def portal_job_listings(self, home: str) -> list[dict[str, Any]]:
        raise RuntimeError("its records are unreadable")


class _Odd:
    @hookimpl
    def portal_job_listings(self) -> list[str]:
        return ["not a row"]


def test_every_plugins_rows_and_none_of_a_failing_ones(
    pm: pluggy.PluginManager, plugins: Plugins, caplog: pytest.LogCaptureFixture
) -> None:
    pm.register(_Fails(), name="fails")
    pm.register(_Lists(), name="lists")
    pm.register(_Odd(), name="odd")
    with caplog.at_level(logging.ERROR):
        rows = plugins.job_listings("/h")
    assert rows == [{"job": "r-1", "source": "acme", "home": "/h"}]
    logged = caplog.text
    assert "job listing of" in logged and "its records are unreadable" in logged
    assert "each row must be a dict" in logged
    assert any(r["kind"] == "job listing" for r in plugins.inventory())


def test_no_plugin_lists_nothing(plugins: Plugins) -> None:
    assert plugins.job_listings("/h") == []
