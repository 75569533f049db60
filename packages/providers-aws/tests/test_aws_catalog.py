"""The EC2 catalog, the plugin's registration, and the shared metadata plumbing."""

from __future__ import annotations

from pathlib import Path

import pytest

from portal.core.domain import CapacityClass, MachineType, Offer
from portal.core.errors import InvalidSettingError
from portal.core.plugins import Plugins, get_plugin_manager
from portal.core.settings import Settings
from portal.core.specs import NoticeSourceContext
from portal.providers.aws import catalog, plugin
from portal.providers.aws.notices import AwsNoticeSource


def test_catalog_loads_common_spot_types() -> None:
    types = catalog.load_machine_types()
    assert len(types) >= 50
    assert len({t.name for t in types}) == len(types)
    assert all(isinstance(t, MachineType) and t.provider == "aws" for t in types)
    g5 = catalog.find("g5.xlarge")
    assert g5 is not None and (g5.vcpus, g5.memory_gib, g5.gpus, g5.gpu_model) == (
        4,
        16.0,
        1,
        "A10G",
    )
    assert catalog.find("p5.48xlarge").gpus == 8  # type: ignore[union-attr]
    assert catalog.find("no.such") is None


def test_pool_identity_matches_offer_pool() -> None:
    machine = catalog.find("c7i.large")
    assert machine is not None
    offer = Offer(
        machine_type=machine,
        region="us-east-1",
        zone="us-east-1a",
        capacity=CapacityClass.SPOT,
        price_per_hour=0.03,
        notice_s=catalog.SPOT_NOTICE_S,
    )
    assert (
        catalog.pool_identity("c7i.large", "spot", region="us-east-1", zone="us-east-1a")
        == offer.pool
    )


def test_plugin_registers_the_source_and_the_catalog() -> None:
    pm = get_plugin_manager(autoload=False)
    pm.register(plugin, name="aws")
    plugins = Plugins(pm)
    spec = plugins.notice_source("aws")
    assert spec.provider == "aws"
    source = spec.factory(NoticeSourceContext(settings={"dmi_dir": "/nonexistent"}))
    assert isinstance(source, AwsNoticeSource) and source.detect() is False
    source.close()
    (types_spec,) = [c for c in plugins.catalogs().values() if c.provider == "aws"]
    assert list(types_spec.machine_types()) == list(catalog.load_machine_types())


def test_settings_from_config_toml_reach_the_source(tmp_path: Path) -> None:
    """The AWS plugin's settings (portal_settings) resolved by the settings stack are what its
    source is built from: the names it reads are the names it declares."""
    (tmp_path / "config.toml").write_text("[aws]\npoll_interval_s = 0.25\ntoken_ttl_s = 600\n")
    settings = Settings.load(
        environ={"PORTAL_HOME": str(tmp_path)}, project=False, plugins=Plugins.load()
    )
    context = NoticeSourceContext(settings={**settings.values, "dmi_dir": "/nonexistent"})
    source = AwsNoticeSource.from_context(context)
    assert (source.poll_interval_s, source.slow_interval_s, source.token_ttl_s) == (
        0.25,
        5.0,
        600,
    )
    (tmp_path / "config.toml").write_text("[aws]\ntoken_ttl_s = 99999\n")
    with pytest.raises(InvalidSettingError, match=r"aws\.token_ttl_s .* from 1 to 21600"):
        Settings.load(environ={"PORTAL_HOME": str(tmp_path)}, project=False)
