"""A conformance fake of Azure IMDS (Scheduled Events and instance metadata) for tests, on 127.0.0.1.

Written from Microsoft's documented behaviour (no emulator exists), shipped so that tests elsewhere
and third-party plugins can drive the same fake::

    from portal.providers.azure.testing import FakeAzureMetadata

    with FakeAzureMetadata(vm_name="vm-1") as azure:
        source = AzureNoticeSource(endpoint=azure.url)
        event_id = azure.preempt(in_seconds=30)
        azure.fail_next(429)      # faults come from portal.providers.base.testing

What it models: ``Metadata: true`` required (400 without; 400 with ``X-Forwarded-For``), the
``api-version`` query parameter required; the Scheduled Events document with a
``DocumentIncarnation`` that increases on every change; events for other VMs; ``NotBefore`` in
RFC 1123 form, emptied when an event starts; events that disappear when done or cancelled (there is
no Completed status); acknowledgement by POST ``{"StartRequests": [{"EventId": ...}]}``, which
starts the event; 429 above ``rate_limit_per_s`` requests a second (off by default); and
``/metadata/instance`` with ``compute.name``, ``vmSize``, ``priority``, ``evictionPolicy``.
"""

from __future__ import annotations

import email.utils
import json
import secrets
import time
import uuid
from typing import Any

from portal.providers.base.testing import FakeHTTPServer, RecordedRequest, Reply

__all__ = ["FakeAzureMetadata", "FakeResourceManager"]

EVENTS_PATH = "/metadata/scheduledevents"
INSTANCE_PATH = "/metadata/instance"


class FakeAzureMetadata(FakeHTTPServer):
    """Azure IMDS, scriptable from tests."""

    def __init__(
        self,
        *,
        vm_name: str = "portal-vm-0",
        vm_size: str = "Standard_D4s_v5",
        priority: str = "Spot",
        eviction_policy: str = "Deallocate",
        location: str = "eastus",
        zone: str = "1",
        skew_s: float = 0.0,
        rate_limit_per_s: int | None = None,
    ) -> None:
        super().__init__()
        self.vm_name = vm_name
        self.compute = {
            "name": vm_name,
            "vmSize": vm_size,
            "priority": priority,
            "evictionPolicy": eviction_policy,
            "location": location,
            "zone": zone,
            "vmScaleSetName": "",
            "vmId": str(uuid.UUID(int=1)),
            "subscriptionId": "00000000-0000-0000-0000-00000000cafe",
            "resourceGroupName": "portal-test",
        }
        self.skew_s = skew_s
        self.rate_limit_per_s = rate_limit_per_s
        self.incarnation = 1
        self.events: list[dict[str, Any]] = []
        self.acknowledged: list[str] = []
        self._recent: list[float] = []

    def now(self) -> float:
        return time.time() + self.skew_s

    # --- scripting ------------------------------------------------------------------------------

    def add_event(
        self,
        event_type: str = "Preempt",
        *,
        in_seconds: float = 30.0,
        resources: list[str] | None = None,
        event_id: str | None = None,
        status: str = "Scheduled",
    ) -> str:
        """Schedule an event (for this VM unless ``resources`` says otherwise); returns its id."""
        event_id = event_id or str(uuid.uuid4()).upper()
        started = status == "Started"
        event = {
            "EventId": event_id,
            "EventStatus": status,
            "EventType": event_type,
            "ResourceType": "VirtualMachine",
            "Resources": list(resources if resources is not None else [self.vm_name]),
            "NotBefore": ""
            if started
            else email.utils.formatdate(self.now() + in_seconds, usegmt=True),
            "Description": f"{event_type} scheduled by the fake",
            "EventSource": "Platform",
            "DurationInSeconds": -1 if event_type in ("Preempt", "Terminate") else 5,
        }
        with self.lock:
            self.events.append(event)
            self.incarnation += 1
        self.changed()
        return event_id

    def preempt(self, in_seconds: float = 30.0, **kwargs: Any) -> str:
        """A Spot eviction of this VM ``in_seconds`` from now."""
        return self.add_event("Preempt", in_seconds=in_seconds, **kwargs)

    def start_event(self, event_id: str) -> None:
        """The event starts: ``EventStatus`` becomes ``Started`` and ``NotBefore`` is emptied."""
        with self.lock:
            for event in self.events:
                if event["EventId"] == event_id:
                    event["EventStatus"] = "Started"
                    event["NotBefore"] = ""
                    self.incarnation += 1
                    return
        raise KeyError(event_id)

    def remove(self, event_id: str, *, bump_incarnation: bool = True) -> None:
        """The event is done or cancelled: it disappears (``bump_incarnation=False`` makes an
        inconsistent document, as a glitch would)."""
        with self.lock:
            before = len(self.events)
            self.events = [e for e in self.events if e["EventId"] != event_id]
            if len(self.events) == before:
                raise KeyError(event_id)
            if bump_incarnation:
                self.incarnation += 1

    def cancel(self) -> None:
        """Remove every event (each one cancelled)."""
        with self.lock:
            if self.events:
                self.events = []
                self.incarnation += 1

    # --- the service ------------------------------------------------------------------------------

    def _rate_limited(self) -> bool:
        if self.rate_limit_per_s is None:
            return False
        now = time.monotonic()
        self._recent = [t for t in self._recent if now - t < 1.0] + [now]
        return len(self._recent) > self.rate_limit_per_s

    def respond(self, request: RecordedRequest) -> Reply:
        if (request.header("metadata") or "").lower() != "true" or request.header(
            "x-forwarded-for"
        ):
            body = b'{"error": "Bad request. Required metadata header not specified"}'
            return Reply(400, body, {}, "application/json")
        if "api-version" not in request.query:
            return Reply(
                400,
                b'{"error": "Bad request. api-version was not specified"}',
                {},
                "application/json",
            )
        with self.lock:
            if self._rate_limited():
                return Reply(429, b'{"error": "Too many requests"}', {}, "application/json")
            if request.path == EVENTS_PATH and request.method == "GET":
                document = {"DocumentIncarnation": self.incarnation, "Events": self.events}
                return Reply(200, json.dumps(document).encode(), {}, "application/json")
            if request.path == EVENTS_PATH and request.method == "POST":
                return self._acknowledge(request.body)
            if request.path == INSTANCE_PATH and request.method == "GET":
                document = {"compute": self.compute, "network": {"interface": []}}
                return Reply(200, json.dumps(document).encode(), {}, "application/json")
        return Reply(404, b'{"error": "Not found"}', {}, "application/json")

    def _acknowledge(self, body: bytes) -> Reply:
        try:
            requests = json.loads(body)["StartRequests"]
            ids = [str(r["EventId"]) for r in requests]
        except (ValueError, KeyError, TypeError):
            return Reply(400, b'{"error": "Bad request"}', {}, "application/json")
        known = {e["EventId"] for e in self.events}
        for event_id in ids:
            if event_id in known:
                self.acknowledged.append(event_id)
                self.start_event(event_id)
        return Reply(200, b"", {}, "application/json")


class FakeResourceManager(FakeHTTPServer):
    """Azure Resource Manager's VM ``GET`` (with ``$expand=instanceView``) and an App Service
    style managed-identity token endpoint, on 127.0.0.1, for the lost-job rules' VM check.
    Written from the documented API (no emulator of Resource Manager exists)::

        with FakeResourceManager() as arm:
            arm.add(path, vm_id)                     # a running VM
            monkeypatch.setenv("IDENTITY_ENDPOINT", arm.identity_endpoint)
            monkeypatch.setenv("IDENTITY_HEADER", arm.identity_header)
            arm.set_power(path, "deallocated")       # evicted, Deallocate policy
            arm.delete(path)                         # evicted, Delete policy

    What it models (also the resource SKUs list, ``skus``: VM size -> vCPUs): tokens only for
    ``X-IDENTITY-HEADER`` (App Service's managed identity
    protocol, which azure-identity speaks); the VM answered with ``properties.vmId`` and
    ``properties.instanceView.statuses`` (provisioning and power state), ``ResourceNotFound``
    404 for one that does not exist, 401 without a token it issued, errors in ARM's JSON shape.
    """

    def __init__(self) -> None:
        super().__init__()
        self.vms: dict[str, dict[str, str]] = {}  # resource path -> vmId, power
        self.tokens: set[str] = set()
        self.resources: list[str] = []  # the resource each token was asked for
        self.identity_header = secrets.token_hex(8)
        self.refuse_tokens = False  # True: every token is refused (401), as a revoked identity's
        self.skus: dict[str, int] = {}  # VM size -> vCPUs, listed by the resource SKUs API

    @property
    def identity_endpoint(self) -> str:
        return f"{self.url}/msi/token"

    def add(self, path: str, vm_id: str, power: str = "running") -> None:
        with self.lock:
            self.vms[path.lower()] = {"vmId": vm_id, "power": power}

    def set_power(self, path: str, power: str) -> None:
        with self.lock:
            self.vms[path.lower()]["power"] = power

    def delete(self, path: str) -> None:
        with self.lock:
            self.vms.pop(path.lower(), None)

    def respond(self, request: RecordedRequest) -> Reply:
        if request.path == "/msi/token":
            return self._token(request)
        if request.method != "GET":
            return _arm_error(405, "MethodNotAllowed", "The method is not allowed")
        auth = request.header("authorization") or ""
        with self.lock:
            if self.refuse_tokens or not auth.startswith("Bearer ") or auth[7:] not in self.tokens:
                return _arm_error(401, "InvalidAuthenticationToken", "The access token is invalid.")
            if request.query.get("api-version") is None:
                return _arm_error(400, "MissingApiVersionParameter", "api-version is required")
            if request.path.lower().endswith("/providers/microsoft.compute/skus"):
                skus = [
                    {
                        "resourceType": "virtualMachines",
                        "name": size,
                        "locations": [request.query.get("$filter", "").split("'")[1:2]],
                        "capabilities": [
                            {"name": "vCPUs", "value": str(vcpus)},
                            {"name": "MemoryGB", "value": str(vcpus * 4)},
                        ],
                    }
                    for size, vcpus in self.skus.items()
                ]
                listing = {"value": [{"resourceType": "disks", "name": "Premium_LRS"}, *skus]}
                return Reply(200, json.dumps(listing).encode(), {}, "application/json")
            vm = self.vms.get(request.path.lower())
            if vm is None:
                return _arm_error(
                    404, "ResourceNotFound", f"The Resource '{request.path}' was not found."
                )
            statuses = [{"code": "ProvisioningState/succeeded", "level": "Info"}]
            if vm["power"]:
                statuses.append({"code": f"PowerState/{vm['power']}", "level": "Info"})
            body = {
                "id": request.path,
                "name": request.path.rsplit("/", 1)[-1],
                "properties": {"vmId": vm["vmId"], "instanceView": {"statuses": statuses}},
            }
        return Reply(200, json.dumps(body).encode(), {}, "application/json")

    def _token(self, request: RecordedRequest) -> Reply:
        if request.header("x-identity-header") != self.identity_header:
            return _arm_error(401, "Unauthorized", "X-IDENTITY-HEADER is missing or wrong")
        token = "eyJ0eXAi.portal-test." + secrets.token_urlsafe(16)
        resource = request.query.get("resource", "")
        with self.lock:
            self.tokens.add(token)
            self.resources.append(resource)
        body = {
            "access_token": token,
            "expires_on": str(int(time.time()) + 3600),
            "resource": resource,
            "token_type": "Bearer",
            "client_id": "portal-test",
        }
        return Reply(200, json.dumps(body).encode(), {}, "application/json")


def _arm_error(status: int, code: str, message: str) -> Reply:
    body = {"error": {"code": code, "message": message}}
    return Reply(status, json.dumps(body).encode(), {}, "application/json")
