"""The example policy passes Portal's placement-policy contract, and is found by its name."""

from __future__ import annotations

from portal_acme_policy.plugin import StateCap

from portal.core.plugins import Plugins
from portal.core.specs import PlacementPolicy
from portal.testing import PlacementPolicyContract


class TestStateCap(PlacementPolicyContract):
    def make_policy(self) -> PlacementPolicy:
        return StateCap()


def test_installed_it_is_found_by_its_name() -> None:
    """Installed (its entry point), Portal's plugin manager finds it as `acme`, and its setting."""
    plugins = Plugins.load()
    spec = plugins.placement_policy("acme")
    assert isinstance(spec.factory({}), StateCap)
    assert "acme.max_gib" in plugins.settings()
