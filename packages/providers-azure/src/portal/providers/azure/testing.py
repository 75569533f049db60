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
import time
import uuid
from typing import Any

from portal.providers.base.testing import FakeHTTPServer, RecordedRequest, Reply

__all__ = ["FakeAzureMetadata"]

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
