"""The GCP notice source: Spot/preemptible preemption and host maintenance from the GCE metadata
server, watched with hanging GETs.

A Spot VM has 30 s between ``instance/preempted`` turning ``TRUE`` and its hard stop, so polling
once a second would spend a noticeable part of it waiting. The metadata server offers hanging GETs
(``?wait_for_change=true&last_etag=...``) that answer the moment a value changes; the source runs
one small watcher thread per value (:mod:`portal.providers.base.watching`), each doing what
Google's own clients do: a plain GET for the current value and its ETag (so a node restarted
mid-notice sees it), then a loop of hanging GETs, sleeping and retrying on errors. ``poll`` only
waits for what the watchers saw.

Every value change a watcher sees is queued and reported in order, so ``TRUE -> FALSE`` (the
notice made void) is a notice and then its withdrawal, each once, and a value flapping back and
forth is reported as it happened.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import CapacityClass, Notice, NoticeKind
from portal.core.specs import NoticeSourceContext
from portal.providers.base.metadata import Answer, MetadataUnavailable
from portal.providers.base.source import MetadataService
from portal.providers.base.watching import Seen, Watched, WatchingNoticeSource
from portal.providers.gcp.catalog import pool_identity
from portal.providers.gcp.parsing import (
    maintenance_stops_machine,
    parse_maintenance_event,
    parse_preempted,
)

__all__ = ["HOST_ENV", "IP_ENV", "GcpNoticeSource", "is_gce"]

PROVIDER = "gcp"
SOURCE_NAME = "gcp"
HOST_ENV = "GCE_METADATA_HOST"
IP_ENV = "GCE_METADATA_IP"
#: The metadata server's address. The IP rather than ``metadata.google.internal``: a name lookup
#: can hang start-up where DNS is broken, and the IP is what Google's Go client uses.
DEFAULT_HOST = "169.254.169.254"
PREFIX = "/computeMetadata/v1"
PREEMPTED = "/instance/preempted"
MAINTENANCE_EVENT = "/instance/maintenance-event"
FLAVOR = {"Metadata-Flavor": "Google"}
#: Spot and preemptible VMs get ACPI soft-off, then a hard stop 30 s later.
SPOT_NOTICE_S = 30.0
#: Compute Engine announces a terminating host maintenance event 60 s ahead.
MAINTENANCE_NOTICE_S = 60.0


def is_gce(dmi: Mapping[str, str]) -> bool:
    """Whether DMI says this is a Compute Engine VM (as cloud-init and google-auth check)."""
    return (
        "google compute engine" in dmi.get("product_name", "").lower()
        or dmi.get("sys_vendor", "").strip().lower() == "google"
        or dmi.get("bios_vendor", "").strip().lower() == "google"
    )


METADATA_SERVER = MetadataService(
    provider=PROVIDER,
    cloud="GCP",
    platform="Compute Engine",
    service="GCE metadata server",
    override_env=HOST_ENV,
    default_endpoint=DEFAULT_HOST,
    on_platform=is_gce,
    path_prefix=PREFIX,
    headers=FLAVOR,
    hints={
        403: "refused the request (403): the Metadata-Flavor header was stripped on the way; "
        "retrying",
        404: "has no such value (404); retrying",
        429: "is rate limiting (429); retrying",
        503: "is unavailable (503), as during maintenance; retrying",
    },
)


class GcpNoticeSource(WatchingNoticeSource):
    """Watches ``instance/preempted`` and ``instance/maintenance-event`` with hanging GETs."""

    name = SOURCE_NAME
    metadata = METADATA_SERVER

    def __init__(
        self,
        *,
        host: str | None = None,
        dmi_dir: str | os.PathLike[str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        hang_s: float = 30.0,
        request_timeout_s: float = 2.0,
        preemption_notice_s: float = SPOT_NOTICE_S,
        maintenance_notice_s: float = MAINTENANCE_NOTICE_S,
    ) -> None:
        """``host`` overrides the metadata server (``GCE_METADATA_HOST``, ``host[:port]``);
        without it, the server is contacted only if DMI (read from ``dmi_dir``) says GCE."""
        super().__init__(
            override=host,
            dmi_dir=dmi_dir,
            clock=clock,
            request_timeout_s=request_timeout_s,
            hang_s=hang_s,
        )
        self.preemption_notice_s = preemption_notice_s
        self.maintenance_notice_s = maintenance_notice_s
        self._machine: dict[str, str | None] | None = None

    @classmethod
    def from_context(cls, context: NoticeSourceContext) -> GcpNoticeSource:
        s = context.settings
        env = context.environ
        return cls(
            host=s.get("gcp.metadata_host") or env.get(HOST_ENV) or env.get(IP_ENV) or None,
            dmi_dir=s.get("dmi_dir"),
            clock=context.clock,
            hang_s=float(s.get("gcp.hang_s") or 30.0),
            preemption_notice_s=float(s.get("gcp.preemption_notice_s") or SPOT_NOTICE_S),
            maintenance_notice_s=float(s.get("gcp.maintenance_notice_s") or MAINTENANCE_NOTICE_S),
        )

    # --- what the watchers watch ---------------------------------------------------------------

    def watched(self) -> list[Watched]:
        return [
            Watched(PREEMPTED, parse_preempted),
            Watched(MAINTENANCE_EVENT, parse_maintenance_event),
        ]

    def wait_query(self, etag: str, hang_s: int) -> str:
        return f"?wait_for_change=true&last_etag={etag}&timeout_sec={hang_s}"

    def check(self, answer: Answer, url: str) -> None:
        """Raises :class:`MetadataUnavailable` unless ``answer`` is a value from the server."""
        if answer.status == 200 and answer.header("metadata-flavor") != "Google":
            raise MetadataUnavailable(
                f"{url} answered without 'Metadata-Flavor: Google': it is not the GCE "
                f"metadata server (check {HOST_ENV})",
                details={"endpoint": url},
            )
        self.expect(answer, url)

    def apply(self, seen: Seen) -> list[Notice]:
        if seen.key == PREEMPTED:
            on, kind, length = seen.value == "TRUE", NoticeKind.PREEMPTION, self.preemption_notice_s
        else:
            on = maintenance_stops_machine(seen.value)
            kind, length = NoticeKind.MAINTENANCE, self.maintenance_notice_s
            if not on and seen.value != "NONE":
                self.log.info("host maintenance %s: the VM keeps running; no notice", seen.value)
        what = f"{seen.key}={seen.value}"
        if not on:
            return self.withdraw_once(seen.key, why=what)
        if seen.key in self._reported:
            return []
        notice = self.notice(
            Notice.derive_id(PROVIDER, seen.key, seen.value, seen.at),
            kind,
            seen.at + length,
            {"key": seen.key.lstrip("/"), "value": seen.value, "etag": seen.etag},
            seen_at=seen.at,
        )
        return self.report_once(seen.key, notice, why=what)

    # --- the machine ---------------------------------------------------------------------------

    def machine_info(self) -> dict[str, str | None]:
        """Machine type, capacity class (``SPOT``/preemptible -> spot), region and zone.

        Keys: ``provider``, ``instance_type``, ``capacity``, ``provisioning_model``, ``region``,
        ``zone``, ``pool`` (as :attr:`portal.core.domain.Offer.pool`), and what Compute Engine's
        API calls the VM (the lost-job rules ask ``instances.get`` about it): ``project``,
        ``instance_name``, ``instance_id``.
        """
        if self._machine is None:
            with self.one_off_client() as client:

                def value(path: str) -> str | None:
                    answer = client.request("GET", path, timeout_s=self.request_timeout_s)
                    if answer.status == 404:
                        return None
                    self.check(answer, client.url(path))
                    return answer.text[:256] or None

                machine_type = (value("/instance/machine-type") or "").rsplit("/", 1)[-1] or None
                zone = (value("/instance/zone") or "").rsplit("/", 1)[-1] or None
                model = value("/instance/scheduling/provisioning-model")
                if model is None:  # older VMs: only the preemptible flag
                    preemptible = value("/instance/scheduling/preemptible")
                    model = "SPOT" if (preemptible or "").upper() == "TRUE" else "STANDARD"
                project = value("/project/project-id")
                name = value("/instance/name")
                instance_id = value("/instance/id")
            capacity = CapacityClass.SPOT if model.upper() == "SPOT" else CapacityClass.ON_DEMAND
            region = zone.rsplit("-", 1)[0] if zone else None
            self._machine = {
                "provider": PROVIDER,
                "instance_type": machine_type,
                "capacity": str(capacity),
                "provisioning_model": model,
                # the notice a reclaim gives this machine (the check's warning says it)
                "notice_s": f"{self.preemption_notice_s:g}"
                if capacity is CapacityClass.SPOT
                else None,
                "region": region,
                "zone": zone,
                "pool": pool_identity(machine_type, capacity, region=region, zone=zone)
                if machine_type and region
                else None,
                "project": project,
                "instance_name": name,
                "instance_id": instance_id,
            }
        return dict(self._machine)
