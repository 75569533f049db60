"""The Azure answer to the lost-job rules' question, through azure-identity's real managed
identity flow (App Service's protocol) against the Resource Manager fake on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from portal.core.plugins import Plugins
from portal.providers.azure import plugin
from portal.providers.azure.machines import vm_path
from portal.providers.azure.testing import FakeResourceManager

pytest.importorskip("azure.identity", reason="the api extra (azure-identity) is not installed")

SUBSCRIPTION, GROUP, VM_ID = "00000000-0000-0000-0000-00000000cafe", "portal-test", "vm-id-1"
PATH = vm_path(subscription=SUBSCRIPTION, resource_group=GROUP, name="portal-vm-0")


@pytest.fixture
def arm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeResourceManager]:
    with FakeResourceManager() as fake:
        monkeypatch.setenv("IDENTITY_ENDPOINT", fake.identity_endpoint)
        monkeypatch.setenv("IDENTITY_HEADER", fake.identity_header)
        # Never the instance metadata address (the other managed-identity protocol).
        monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", "http://127.0.0.1:9")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "MSI_ENDPOINT"):
            monkeypatch.delenv(name, raising=False)
        yield fake


def _ask(
    arm: FakeResourceManager, *, vm_id: str = VM_ID, scale_set: str = "", name: str = "portal-vm-0"
) -> bool | None:
    plugins = Plugins.load(autoload=False)
    plugins.pm.register(plugin, name="azure")
    facts = {
        "provider": "azure",
        "subscription": SUBSCRIPTION,
        "resource_group": GROUP,
        "instance_name": name,
        "instance_id": vm_id,
        "scale_set": scale_set,
    }
    settings = {"azure.management_endpoint": arm.url}
    return plugins.machine_exists("azure", name, "/h", facts, settings)


def test_a_running_vm_is_there(arm: FakeResourceManager) -> None:
    arm.add(PATH, VM_ID)
    assert _ask(arm) is True
    assert arm.resources == ["https://management.azure.com"]  # the token is for ARM alone


@pytest.mark.parametrize("power", ["deallocated", "deallocating", "stopped", "stopping"])
def test_an_evicted_vm_with_policy_deallocate_is_gone(arm: FakeResourceManager, power: str) -> None:
    arm.add(PATH, VM_ID)
    arm.set_power(PATH, power)
    assert _ask(arm) is False


def test_an_evicted_vm_with_policy_delete_is_gone(arm: FakeResourceManager) -> None:
    arm.add(PATH, VM_ID)
    arm.delete(PATH)
    assert _ask(arm) is False


def test_a_vm_still_provisioning_is_there(arm: FakeResourceManager) -> None:
    arm.add(PATH, VM_ID, power="")
    assert _ask(arm) is True


def test_a_new_vm_that_took_the_name_is_not_the_nodes(arm: FakeResourceManager) -> None:
    arm.add(PATH, "another-vm-id")
    assert _ask(arm) is False


def test_a_scale_set_instance_is_asked_as_one(arm: FakeResourceManager) -> None:
    path = vm_path(
        subscription=SUBSCRIPTION, resource_group=GROUP, name="workers_7", scale_set="workers"
    )
    assert path.endswith("/virtualMachineScaleSets/workers/virtualMachines/7")
    arm.add(path, VM_ID)
    assert _ask(arm, scale_set="workers", name="workers_7") is True
    arm.set_power(path, "deallocated")
    assert _ask(arm, scale_set="workers", name="workers_7") is False


def test_refused_credentials_never_say_gone(
    arm: FakeResourceManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    arm.add(PATH, VM_ID)
    arm.refuse_tokens = True  # tokens no longer accepted: 401
    assert _ask(arm) is None
    arm.refuse_tokens = False
    monkeypatch.setenv("IDENTITY_HEADER", "wrong")  # the identity endpoint refuses: no token
    assert _ask(arm) is None


def test_an_api_that_cannot_be_reached_never_says_gone(arm: FakeResourceManager) -> None:
    plugins = Plugins.load(autoload=False)
    plugins.pm.register(plugin, name="azure")
    facts = {"subscription": SUBSCRIPTION, "resource_group": GROUP, "instance_name": "vm"}
    closed = {"azure.management_endpoint": "http://127.0.0.1:9"}
    assert plugins.machine_exists("azure", "vm", "/h", facts, closed) is None


def test_other_machines_are_not_azure_to_answer(arm: FakeResourceManager) -> None:
    plugins = Plugins.load(autoload=False)
    plugins.pm.register(plugin, name="azure")
    settings = {"azure.management_endpoint": arm.url}
    assert plugins.machine_exists("gcp", "vm", "/h", {"instance_name": "vm"}, settings) is None
    assert plugins.machine_exists("azure", "local", "/h", {"region": "eastus"}, settings) is None
    assert arm.count() == 0


def test_a_vm_size_no_catalog_knows_is_sized_by_the_resource_skus(
    arm: FakeResourceManager,
) -> None:
    """portal_machine_vcpus: the vCPUs capability of the size in the subscription's SKU list;
    an unknown size, no subscription, or an API out of reach is None."""
    arm.skus = {"Standard_D96as_v5": 96, "Standard_NC4as_T4_v3": 4}
    plugins = Plugins.load(autoload=False)
    plugins.pm.register(plugin, name="azure")
    settings = {
        "azure.management_endpoint": arm.url,
        "azure.subscription": SUBSCRIPTION,
        "azure.sku_location": "westeurope",
    }
    assert plugins.machine_vcpus("azure", "Standard_D96as_v5", settings) == 96
    assert plugins.machine_vcpus("azure", "Standard_NC4as_T4_v3", settings) == 4
    assert plugins.machine_vcpus("azure", "Standard_Z1", settings) is None
    assert plugins.machine_vcpus("aws", "c7i.large", settings) is None
    no_subscription = {k: v for k, v in settings.items() if k != "azure.subscription"}
    assert plugins.machine_vcpus("azure", "Standard_D96as_v5", no_subscription) is None
    closed = {**settings, "azure.management_endpoint": "http://127.0.0.1:9"}
    assert plugins.machine_vcpus("azure", "Standard_D96as_v5", closed) is None
    listed = [r for r in arm.requests if r.path.endswith("/skus")]
    assert listed and listed[0].query["$filter"] == "location eq 'westeurope'"
