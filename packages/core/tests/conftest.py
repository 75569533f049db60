from __future__ import annotations

from collections.abc import Iterator

import pluggy
import pytest

from portal.core.plugins import Plugins, get_plugin_manager
from portal.testing import FakeClock


@pytest.fixture
def pm() -> pluggy.PluginManager:
    """A fresh plugin manager with no plugin registered (entry points not loaded)."""
    return get_plugin_manager(autoload=False)


@pytest.fixture
def plugins(pm: pluggy.PluginManager) -> Plugins:
    return Plugins(pm)


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    yield FakeClock()
