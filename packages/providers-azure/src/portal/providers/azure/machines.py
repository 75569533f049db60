"""What Portal asks Azure Resource Manager: whether a VM still exists (the lost-job rules'
question, ``portal_machine_exists``, about once a minute while a job's node is silent), and how
many vCPUs a VM size no catalog knows has (``portal_machine_vcpus``: the resource SKUs).

Azure Resource Manager's VM (``$expand=instanceView``) names the VM's power state. An evicted
Spot VM is deallocated (eviction policy ``Deallocate``) or deleted (``Delete``: 404). For the
job, ``PowerState/deallocating``, ``deallocated``, ``stopping``, ``stopped`` and 404 are "gone"
(the VM's memory, so the job's process, is gone); so is a VM of the same name with another
``vmId`` (deleted and made again). ``running``, ``starting`` or no power state yet (still
provisioning) are "still there". Anything else (no credentials, a refused or failed call) is
"cannot tell" (None), never "gone".

Credentials are azure-identity's ``DefaultAzureCredential`` of the control plane (a service
principal's variables, workload identity, a managed identity, the Azure CLI's login) for
``https://management.azure.com/.default``; the ``api`` extra installs it. A scale set's VM is
asked as the scale set's instance. ``azure.management_endpoint`` points the call at a sovereign
cloud or a test server.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Mapping
from typing import Any

from portal.providers.base.sdk import sdk_missing

__all__ = [
    "API_VERSION",
    "DEFAULT_ENDPOINT",
    "GONE_POWER_STATES",
    "machine_exists",
    "sku_vcpus",
    "vm_exists",
]

log = logging.getLogger("portal.providers.azure")

DEFAULT_ENDPOINT = "https://management.azure.com"
API_VERSION = "2024-07-01"
SKUS_API_VERSION = "2021-07-01"
#: Power states in which the job's process cannot be running any more.
GONE_POWER_STATES = frozenset(
    {
        "PowerState/deallocating",
        "PowerState/deallocated",
        "PowerState/stopping",
        "PowerState/stopped",
    }
)
TIMEOUT_S = 10.0


def vm_path(
    *, subscription: str, resource_group: str, name: str, scale_set: str | None = None
) -> str:
    """The VM's resource path: a plain VM, or a scale set's instance (its name ``set_N``)."""
    quote = urllib.parse.quote
    base = (
        f"/subscriptions/{quote(subscription)}/resourceGroups/{quote(resource_group)}"
        "/providers/Microsoft.Compute"
    )
    if scale_set:
        number = name.rsplit("_", 1)[-1]
        return f"{base}/virtualMachineScaleSets/{quote(scale_set)}/virtualMachines/{quote(number)}"
    return f"{base}/virtualMachines/{quote(name)}"


def _arm_get(path: str, params: Mapping[str, str], endpoint: str | None, what: str) -> Any:
    """GET ``path`` of Resource Manager with the control plane's credentials: the response, or
    None (logged) when it could not be asked."""
    try:
        import requests

        from azure.core.exceptions import ClientAuthenticationError
        from azure.identity import DefaultAzureCredential
    except ImportError as exc:
        sdk_missing(exc, api="Azure Resource Manager", extra="portal-providers-azure[api]")
        return None
    root = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
    try:
        credential = DefaultAzureCredential(exclude_interactive_browser_credential=True)
        token = credential.get_token(f"{DEFAULT_ENDPOINT}/.default").token
        return requests.get(
            f"{root}{path}",
            params=dict(params),
            headers={"Authorization": f"Bearer {token}"},
            timeout=TIMEOUT_S,
        )
    except (ClientAuthenticationError, requests.RequestException, OSError, ValueError) as exc:
        log.warning("Azure could not be asked %s: %s", what, exc)
        return None


def vm_exists(path: str, *, vm_id: str | None = None, endpoint: str | None = None) -> bool | None:
    """Resource Manager's answer for the VM at ``path`` (of ``vm_id``, when known)."""
    answer = _arm_get(
        path,
        {"api-version": API_VERSION, "$expand": "instanceView"},
        endpoint,
        f"whether VM {path} exists",
    )
    if answer is None:
        return None
    if answer.status_code == 404:
        return False
    if answer.status_code != 200:
        log.warning(
            "Azure could not say whether VM %s exists: HTTP %s %s",
            path,
            answer.status_code,
            answer.text[:200],
        )
        return None
    try:
        properties = answer.json()["properties"]
        found_id = str(properties.get("vmId") or "")
        statuses = [str(s.get("code", "")) for s in properties["instanceView"]["statuses"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("Azure's answer about VM %s is not a VM with its instance view: %s", path, exc)
        return None
    if vm_id and found_id and found_id.lower() != vm_id.lower():
        return False  # the name now belongs to another VM: the node's is gone
    return not any(code in GONE_POWER_STATES for code in statuses)


def sku_vcpus(
    name: str, *, subscription: str, location: str, endpoint: str | None = None
) -> int | None:
    """The ``vCPUs`` capability of VM size ``name`` in Resource Manager's SKU list for
    ``location``, or None when it cannot say."""
    quote = urllib.parse.quote
    answer = _arm_get(
        f"/subscriptions/{quote(subscription)}/providers/Microsoft.Compute/skus",
        {"api-version": SKUS_API_VERSION, "$filter": f"location eq '{location}'"},
        endpoint,
        f"the vCPUs of VM size {name}",
    )
    if answer is None:
        return None
    if answer.status_code != 200:
        log.warning("Azure could not list VM size %s: HTTP %s", name, answer.status_code)
        return None
    try:
        for sku in answer.json()["value"]:
            if sku.get("resourceType") == "virtualMachines" and sku.get("name") == name:
                for capability in sku.get("capabilities", []):
                    if capability.get("name") == "vCPUs":
                        return int(capability["value"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("Azure's SKU list is not what Portal reads: %s", exc)
    return None


def machine_exists(
    provider: str, facts: Mapping[str, str], settings: Mapping[str, Any]
) -> bool | None:
    """The hook's answer: only for an Azure VM whose node reported where it lives."""
    if provider != "azure":
        return None
    subscription, group = facts.get("subscription"), facts.get("resource_group")
    name = facts.get("instance_name")
    if not (subscription and group and name):
        return None
    endpoint = settings.get("azure.management_endpoint")
    path = vm_path(
        subscription=subscription,
        resource_group=group,
        name=name,
        scale_set=facts.get("scale_set") or None,
    )
    return vm_exists(
        path, vm_id=facts.get("instance_id"), endpoint=str(endpoint) if endpoint else None
    )
