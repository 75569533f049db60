"""The Azure notice source: Spot eviction (``Preempt``) and ``Terminate``/``Reboot``/``Redeploy``
from Azure Scheduled Events, with optional early acknowledgement.

Scheduled Events is a document, polled (once a second by default: a Spot eviction gives about 30 s).
It lists events for every VM of the availability set or scale set, so events are kept only when
their ``Resources`` name this VM (its ``compute.name`` from instance metadata, or the setting
``azure_vm_name``). Events have no Completed status: one that is done, or cancelled, disappears
and the ``DocumentIncarnation`` increases. A reported event that disappears is reported withdrawn,
but only once the incarnation moved, so one inconsistent answer cannot drop a real notice.
``Freeze`` (a pause of seconds) is not a notice.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import CapacityClass, Notice, NoticeKind
from portal.core.errors import PortalError
from portal.core.specs import NoticeSourceContext
from portal.providers.azure.catalog import SPOT_NOTICE_S, pool_identity
from portal.providers.azure.parsing import (
    EVENT_TYPES,
    EventsDocument,
    ScheduledEvent,
    parse_compute,
    parse_scheduled_events,
)
from portal.providers.base.metadata import Answer, MetadataUnavailable
from portal.providers.base.polling import Document, PollingNoticeSource
from portal.providers.base.source import MetadataService

__all__ = ["ENDPOINT_ENV", "AzureNoticeSource", "is_azure"]

PROVIDER = "azure"
SOURCE_NAME = "azure"
#: The problem said once while this VM's name cannot be read (every event is then taken as its own).
_NAMES_UNKNOWN = "names-unknown"
#: Azure has no standard override of the IMDS address; this one is Portal's.
ENDPOINT_ENV = "PORTAL_AZURE_METADATA_ENDPOINT"
DEFAULT_ENDPOINT = "http://169.254.169.254"
EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"
INSTANCE = "/metadata/instance?api-version=2021-02-01"
#: cloud-init's test for Azure: the chassis asset tag every Azure VM carries.
AZURE_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77"
KINDS = {
    "Preempt": NoticeKind.PREEMPTION,
    "Terminate": NoticeKind.MAINTENANCE,
    "Reboot": NoticeKind.MAINTENANCE,
    "Redeploy": NoticeKind.MAINTENANCE,
}
_FIRST_CALL_HINT = (
    "the first request to Scheduled Events turns the service on for this VM and can take up to "
    "two minutes; the source keeps retrying"
)


def is_azure(dmi: Mapping[str, str]) -> bool:
    """Whether DMI says this is an Azure VM (cloud-init's chassis asset tag test)."""
    return dmi.get("chassis_asset_tag", "").strip() == AZURE_ASSET_TAG


# "Metadata: true" is required; Portal never goes through a proxy (IMDS rejects X-Forwarded-For),
# which MetadataHTTP guarantees by not reading proxy settings.
AZURE_IMDS = MetadataService(
    provider=PROVIDER,
    cloud="Azure",
    platform="Azure",
    service="Azure IMDS",
    override_env=ENDPOINT_ENV,
    default_endpoint=DEFAULT_ENDPOINT,
    on_platform=is_azure,
    headers={"Metadata": "true"},
    hints={
        400: "refused the request (400): the Metadata: true header was lost, or a proxy added "
        "X-Forwarded-For",
        404: "has no such document (404): check the api-version",
        410: "is not ready (410); retrying",
        429: "is rate limiting (429): too many requests per second; backing off",
    },
)


class AzureNoticeSource(PollingNoticeSource):
    """Polls Azure Scheduled Events for this VM's Preempt, Terminate, Reboot and Redeploy."""

    name = SOURCE_NAME
    metadata = AZURE_IMDS

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        dmi_dir: str | os.PathLike[str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        vm_name: str | None = None,
        poll_interval_s: float = 1.0,
        request_timeout_s: float = 2.0,
        first_request_timeout_s: float = 10.0,
    ) -> None:
        """``endpoint`` overrides the IMDS address (``PORTAL_AZURE_METADATA_ENDPOINT``); without
        it, IMDS is contacted only if DMI (read from ``dmi_dir``) says Azure. ``vm_name`` is the
        name events must carry in ``Resources`` (default: ``compute.name``)."""
        if poll_interval_s < 0.2:
            raise PortalError(
                f"Azure poll interval {poll_interval_s} s is too short: Scheduled Events "
                "rate-limits above 5 requests/s; use 0.2 s or more (1 s is the advice)"
            )
        super().__init__(
            override=endpoint, dmi_dir=dmi_dir, clock=clock, request_timeout_s=request_timeout_s
        )
        self.poll_interval_s = poll_interval_s
        self.first_request_timeout_s = first_request_timeout_s
        self._vm_name = vm_name
        self._compute: dict[str, str] | None = None
        self._events_read = False
        self._incarnation: int | None = None

    @classmethod
    def from_context(cls, context: NoticeSourceContext) -> AzureNoticeSource:
        s = context.settings
        return cls(
            endpoint=s.get("azure.metadata_endpoint") or context.environ.get(ENDPOINT_ENV) or None,
            dmi_dir=s.get("dmi_dir"),
            clock=context.clock,
            vm_name=s.get("azure.vm_name"),
            poll_interval_s=float(s.get("azure.poll_interval_s") or 1.0),
        )

    def documents(self) -> list[Document]:
        return [Document(EVENTS, self.poll_interval_s, self._changes, key="events")]

    # --- this VM ---------------------------------------------------------------------------------

    def _read_compute(self) -> dict[str, str]:
        if self._compute is None:
            answer = self.request("GET", INSTANCE)
            try:
                self._compute = parse_compute(answer.text)
            except ValueError as exc:
                raise self.unreadable(self.client().url(INSTANCE), exc) from None
        return self._compute

    def _names(self) -> frozenset[str] | None:
        """The names this VM's events carry in ``Resources``; None when they cannot be read,
        said once: every event is then taken as this VM's. A needless pause costs less than a
        lost job, and raising here (as before) took no notice at all."""
        if self._vm_name:
            return frozenset({self._vm_name.lower()})
        try:
            name = self._read_compute().get("name", "")
            why = "" if name else "Azure IMDS gives this VM no compute.name"
        except PortalError as exc:
            name, why = "", f"this VM's instance metadata cannot be read ({exc})"
        if name:
            self.problems.clear(_NAMES_UNKNOWN)
            return frozenset({name.lower()})
        self.problems.report(
            _NAMES_UNKNOWN,
            f"{why}, so its scheduled events cannot be told from its neighbours': every "
            "Preempt, Terminate, Reboot and Redeploy event is taken as this VM's (a needless "
            "pause costs less than a lost job). Set azure_vm_name in Portal's settings to tell "
            "them apart",
        )
        return None

    def machine_info(self) -> dict[str, str | None]:
        """VM size, capacity class (priority Spot/Low -> spot), region and zone.

        Keys: ``provider``, ``instance_type``, ``capacity``, ``priority``, ``eviction_policy``,
        ``region``, ``zone``, ``pool`` (as :attr:`portal.core.domain.Offer.pool`), and where
        Resource Manager keeps the VM (the lost-job rules ask it about the VM): ``subscription``,
        ``resource_group``, ``instance_name``, ``scale_set``, ``instance_id`` (the vmId).
        """
        compute = self._read_compute()
        priority = compute.get("priority", "")
        capacity: CapacityClass | None = {
            "spot": CapacityClass.SPOT,
            "low": CapacityClass.SPOT,
            "regular": CapacityClass.ON_DEMAND,
        }.get(priority.lower())
        size, region = compute.get("vmSize") or None, compute.get("location") or None
        zone = f"{region}-{compute['zone']}" if region and compute.get("zone") else None
        return {
            "provider": PROVIDER,
            "instance_type": size,
            "capacity": str(capacity) if capacity else None,
            "priority": priority or None,
            "eviction_policy": compute.get("evictionPolicy") or None,
            # the notice an eviction gives this machine (the check's warning says it)
            "notice_s": f"{SPOT_NOTICE_S:g}" if capacity is CapacityClass.SPOT else None,
            "region": region,
            "zone": zone,
            "pool": pool_identity(size, capacity, region=region, zone=zone)
            if size and capacity and region
            else None,
            "subscription": compute.get("subscriptionId") or None,
            "resource_group": compute.get("resourceGroupName") or None,
            "instance_name": compute.get("name") or None,
            "scale_set": compute.get("vmScaleSetName") or None,
            "instance_id": compute.get("vmId") or None,
        }

    # --- the protocol ------------------------------------------------------------------------------

    def fetch(self, document: Document) -> Answer:
        """The events document; this VM's names first (said once when they cannot be read).
        The first request may wait long: it turns the service on."""
        self._names()
        first = not self._events_read
        timeout = self.first_request_timeout_s if first else self.request_timeout_s
        try:
            answer = self.request("GET", document.path, timeout_s=timeout)
        except MetadataUnavailable as exc:
            if first and "no answer" in exc.message:
                raise MetadataUnavailable(
                    f"{exc.message}: {_FIRST_CALL_HINT}", details=exc.details
                ) from exc
            raise
        self._events_read = True
        return answer

    def _changes(self, answer: Answer) -> list[Notice]:
        document, problems = parse_scheduled_events(answer.text)
        for problem in problems:
            self.problems.report(f"entry:{problem}", f"Azure Scheduled Events: skipped {problem}")
        return self._events_changes(document, self._names(), answer)

    def _events_changes(
        self, document: EventsDocument, names: frozenset[str] | None, answer: Answer
    ) -> list[Notice]:
        """``names`` None: this VM's are unknown, and every event is taken as its own."""
        mine = {e.event_id: e for e in document.events if names is None or e.concerns(names)}
        changes: list[Notice] = []
        for event in mine.values():
            if event.event_id in self._reported:
                continue  # its deadline stays (NotBefore empties when the event starts)
            notice = self._notice_for(event, answer)
            if notice is not None:
                why = f"{event.event_type}, {event.status}" + (
                    ", taken as this VM's: its name is unknown" if names is None else ""
                )
                changes += self.report_once(event.event_id, notice, why=why)
        listed = {e.event_id for e in document.events}
        for event_id in list(self._reported):
            if event_id in mine:
                continue
            if event_id not in listed and document.incarnation == self._incarnation:
                self.problems.report(
                    f"vanished:{event_id}",
                    f"Azure event {event_id} is gone but the document incarnation did not change "
                    f"({document.incarnation}); keeping its notice until it does",
                )
                continue
            # Done or cancelled: either way the notice no longer holds.
            self.problems.clear(f"vanished:{event_id}")
            changes += self.withdraw_once(event_id, why=f"event {event_id} is gone")
        self._incarnation = document.incarnation
        return changes

    def _notice_for(self, event: ScheduledEvent, answer: Answer) -> Notice | None:
        kind = KINDS.get(event.event_type)
        if kind is None:
            if event.event_type not in EVENT_TYPES:
                self.problems.report(
                    f"type:{event.event_type}",
                    f"Azure event type {event.event_type[:40]!r} is unknown; not a notice",
                )
            return None  # Freeze: the VM pauses for seconds and keeps running
        if event.resource_type != "VirtualMachine":
            return None
        now = self.clock.now()
        if event.not_before is None:
            deadline = now  # already started: the machine may go at any moment
        else:
            deadline = self.local_deadline(event.not_before, answer)
        return self.notice(f"azure-{event.event_id}", kind, deadline, event.raw, seen_at=now)

    def acknowledge(self, notice: Notice) -> None:
        """Tell Azure this VM is ready (the checkpoint is safe), so the event may start now
        instead of at ``NotBefore``. Raises :class:`PortalError` if Azure does not take it."""
        event_id = str(notice.raw.get("EventId", ""))
        if notice.provider != PROVIDER or not event_id:
            raise PortalError(
                f"notice {notice.id} is not an Azure scheduled event: only notices from the "
                "azure source can be acknowledged"
            )
        body = json.dumps({"StartRequests": [{"EventId": event_id}]}).encode()
        headers = {"Content-Type": "application/json"}
        self.request("POST", EVENTS, headers=headers, body=body)
        self.log.info("acknowledged Azure event %s: it may start now", event_id)
