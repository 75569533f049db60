from __future__ import annotations

import pluggy
import pytest

from portal.core.plugins import Plugins, get_plugin_manager
from portal.testing import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def pm() -> pluggy.PluginManager:
    """A fresh plugin manager with only core's built-ins (nothing installed is loaded)."""
    return get_plugin_manager(autoload=False)


@pytest.fixture
def plugins(pm: pluggy.PluginManager) -> Plugins:
    return Plugins(pm)
