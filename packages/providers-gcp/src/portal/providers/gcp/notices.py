"""The GCP notice source: Spot/preemptible preemption and host maintenance from the GCE metadata
server, watched with hanging GETs.

A Spot VM has 30 s between ``instance/preempted`` turning ``TRUE`` and its hard stop, so polling
once a second would spend a noticeable part of it waiting. The metadata server offers hanging GETs
(``?wait_for_change=true&last_etag=...``) that answer the moment a value changes; the source runs
one small watcher thread per value, each doing what Google's own clients do: a plain GET for the
current value and its ETag (so a node restarted mid-notice sees it), then a loop of hanging GETs,
sleeping and retrying on errors. ``poll`` only waits for what the watchers saw.

Every value change a watcher sees is queued and reported in order, so ``TRUE -> FALSE`` (the
notice made void) is a notice and then its withdrawal, each once, and a value flapping back and
forth is reported as it happened.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence

import attrs

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import CapacityClass, Notice, NoticeKind
from portal.core.errors import PortalError
from portal.core.metadata import (
    Answer,
    MetadataHTTP,
    MetadataUnavailable,
    ProblemLog,
    open_client,
    read_dmi,
)
from portal.core.specs import NoticeSourceContext
from portal.providers.gcp.catalog import pool_identity
from portal.providers.gcp.parsing import (
    maintenance_stops_machine,
    parse_maintenance_event,
    parse_preempted,
)

__all__ = ["HOST_ENV", "IP_ENV", "GcpNoticeSource", "is_gce"]

log = logging.getLogger("portal.notices.gcp")

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


def is_gce(dmi: dict[str, str]) -> bool:
    """Whether DMI says this is a Compute Engine VM (as cloud-init and google-auth check)."""
    return (
        "google compute engine" in dmi.get("product_name", "").lower()
        or dmi.get("sys_vendor", "").strip().lower() == "google"
        or dmi.get("bios_vendor", "").strip().lower() == "google"
    )


@attrs.frozen
class _Seen:
    """One value a watcher read: which key, the value, when it was first seen."""

    key: str
    value: str
    at: float
    etag: str


class _Watcher:
    """Watches one metadata value with hanging GETs in a daemon thread."""

    def __init__(
        self,
        source: GcpNoticeSource,
        path: str,
        parse: Callable[[str], object],
        http: MetadataHTTP,
    ) -> None:
        self.source = source
        self.path = path
        self.parse = parse
        self.http = http
        self.value: str | None = None
        self.error: MetadataUnavailable | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"portal-gcp{path}", daemon=True)

    def _read(self, etag: str | None) -> Answer:
        s = self.source
        if etag is None:
            return self.http.request("GET", self.path, timeout_s=s.request_timeout_s)
        hang = max(1, round(s.hang_s))
        query = f"?wait_for_change=true&last_etag={etag}&timeout_sec={hang}"
        # The server answers at timeout_sec with the current value; a margin more for the trip,
        # after which a server that stopped answering is an error.
        return self.http.request("GET", self.path + query, timeout_s=hang + max(1.0, hang / 5))

    def _run(self) -> None:
        s = self.source
        etag: str | None = None
        failures = 0
        while not self.stop.is_set():
            try:
                answer = self._read(etag)
                s.check(answer, self.http.url(self.path))
                self.parse(answer.text)  # ValueError: not a documented value
                new_etag = answer.header("etag")
                if not new_etag:
                    raise ValueError("the answer has no ETag to wait on")
                value = answer.text.upper()
                if value != self.value:
                    s._seen(self, value, new_etag)
                self.value = value
                etag = new_etag
                failures = 0
                s._healthy(self)
                continue
            except MetadataUnavailable as exc:
                if self.stop.is_set():
                    return
                s._failed(self, exc)
                # 503 (maintenance): retry after about a second, as Google advises; back off
                # further from a rate limit or a server that keeps failing.
                status = exc.details.get("status")
                delay = 1.0 if status == 503 else 5.0 if status == 429 else min(5.0, 2.0**failures)
            except ValueError as exc:
                url = self.http.url(self.path)
                s._failed(
                    self,
                    MetadataUnavailable(
                        f"GCE metadata at {url} answered something unreadable: {exc}; retrying",
                        details={"endpoint": url},
                    ),
                )
                etag = None  # read the value afresh rather than wait on an ETag of garbage
                delay = min(5.0, 1.0 * 2**failures)
            failures += 1
            self.stop.wait(delay)


class GcpNoticeSource:
    """Watches ``instance/preempted`` and ``instance/maintenance-event`` with hanging GETs."""

    name = SOURCE_NAME

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
        self.override = host
        self.dmi_dir = dmi_dir
        self.clock = clock
        self.hang_s = hang_s
        self.request_timeout_s = request_timeout_s
        self.preemption_notice_s = preemption_notice_s
        self.maintenance_notice_s = maintenance_notice_s
        self.problems = ProblemLog(log)
        self._cond = threading.Condition()
        self._queue: list[_Seen] = []
        self._watchers: list[_Watcher] = []
        self._clients: list[MetadataHTTP] = []
        self._detected: bool | None = None
        self._active: dict[str, Notice] = {}  # watched key -> the notice it holds now
        self._machine: dict[str, str | None] | None = None
        self._closed = False

    @classmethod
    def from_context(cls, context: NoticeSourceContext) -> GcpNoticeSource:
        s = context.settings
        env = context.environ
        return cls(
            host=s.get("gcp_metadata_host") or env.get(HOST_ENV) or env.get(IP_ENV) or None,
            dmi_dir=s.get("dmi_dir"),
            clock=context.clock,
            hang_s=float(s.get("gcp_hang_s", 30.0)),
            preemption_notice_s=float(s.get("gcp_preemption_notice_s", SPOT_NOTICE_S)),
            maintenance_notice_s=float(s.get("gcp_maintenance_notice_s", MAINTENANCE_NOTICE_S)),
        )

    def detect(self) -> bool:
        """An override, or DMI naming Compute Engine. Local files only; never the network."""
        if self._detected is None:
            self._detected = bool(self.override) or is_gce(read_dmi(self.dmi_dir))
        return self._detected

    def _client(self) -> MetadataHTTP:
        if self._closed:
            raise PortalError("the GCP notice source is closed")
        client = open_client(
            source="GCP",
            platform="Compute Engine",
            on_platform=self.detect(),
            override=self.override,
            override_env=HOST_ENV,
            default_endpoint=DEFAULT_HOST,
            what="GCE metadata server",
            path_prefix=PREFIX,
            headers=FLAVOR,
        )
        self._clients.append(client)
        return client

    def _start(self) -> None:
        if self._watchers or self._closed:
            return
        self._watchers = [
            _Watcher(self, PREEMPTED, parse_preempted, self._client()),
            _Watcher(self, MAINTENANCE_EVENT, parse_maintenance_event, self._client()),
        ]
        for watcher in self._watchers:
            watcher.thread.start()

    # --- called by the watchers ----------------------------------------------------------------

    def check(self, answer: Answer, url: str) -> None:
        """Raises :class:`MetadataUnavailable` unless ``answer`` is a value from the server."""
        if answer.status == 200:
            if answer.header("metadata-flavor") != "Google":
                raise MetadataUnavailable(
                    f"{url} answered without 'Metadata-Flavor: Google': it is not the GCE "
                    f"metadata server (check {HOST_ENV})",
                    details={"endpoint": url},
                )
            return
        hints = {
            403: "refused the request (403): the Metadata-Flavor header was stripped on the way",
            404: "has no such value (404)",
            429: "is rate limiting (429)",
            503: "is unavailable (503), as during maintenance",
        }
        why = hints.get(answer.status, f"answered HTTP {answer.status}")
        raise MetadataUnavailable(
            f"GCE metadata server at {url} {why}; retrying",
            details={"endpoint": url, "status": answer.status},
        )

    def _seen(self, watcher: _Watcher, value: str, etag: str) -> None:
        with self._cond:
            self._queue.append(_Seen(watcher.path, value, self.clock.now(), etag))
            self._cond.notify_all()

    def _healthy(self, watcher: _Watcher) -> None:
        if watcher.error is not None:
            watcher.error = None
            self.problems.clear(watcher.path)

    def _failed(self, watcher: _Watcher, error: MetadataUnavailable) -> None:
        watcher.error = error
        self.problems.report(watcher.path, error.message)
        with self._cond:
            self._cond.notify_all()

    # --- the protocol --------------------------------------------------------------------------

    def poll(self, timeout_s: float = 0.0) -> Sequence[Notice]:
        """Waits up to ``timeout_s`` for a watcher to see a change; reports it."""
        self._start()
        end = self.clock.monotonic() + max(0.0, timeout_s)
        changes: list[Notice] = []
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    left = end - self.clock.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                seen, self._queue = self._queue, []
            for item in seen:
                changes.extend(self._apply(item))
            if changes or self._closed or self.clock.monotonic() >= end:
                break
        if not changes:
            errors = [w.error for w in self._watchers if w.error is not None]
            if errors:
                raise errors[0]
        return changes

    def _apply(self, seen: _Seen) -> list[Notice]:
        held = self._active.get(seen.key)
        if seen.key == PREEMPTED:
            on, kind, length = seen.value == "TRUE", NoticeKind.PREEMPTION, self.preemption_notice_s
        else:
            on = maintenance_stops_machine(seen.value)
            kind, length = NoticeKind.MAINTENANCE, self.maintenance_notice_s
            if not on and seen.value != "NONE":
                log.info("host maintenance %s: the VM keeps running; no notice", seen.value)
        if on and held is None:
            notice = Notice(
                id=Notice.derive_id(PROVIDER, seen.key, seen.value, seen.at),
                source=self.name,
                provider=PROVIDER,
                kind=kind,
                deadline=seen.at + length,
                seen_at=seen.at,
                raw={"key": seen.key.lstrip("/"), "value": seen.value, "etag": seen.etag},
            )
            self._active[seen.key] = notice
            log.warning("%s notice %s: %s=%s", kind, notice.id, seen.key, seen.value)
            return [notice]
        if not on and held is not None:
            del self._active[seen.key]
            log.warning("%s notice %s withdrawn: %s=%s", held.kind, held.id, seen.key, seen.value)
            return [held.cancel()]
        return []

    # --- the machine ---------------------------------------------------------------------------

    def machine_info(self) -> dict[str, str | None]:
        """Machine type, capacity class (``SPOT``/preemptible -> spot), region and zone.

        Keys: ``provider``, ``instance_type``, ``capacity``, ``provisioning_model``, ``region``,
        ``zone``, ``pool`` (as :attr:`portal.core.domain.Offer.pool`).
        """
        if self._machine is None:
            client = self._client()
            try:

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
            finally:
                client.close()
                self._clients.remove(client)
            capacity = CapacityClass.SPOT if model.upper() == "SPOT" else CapacityClass.ON_DEMAND
            region = zone.rsplit("-", 1)[0] if zone else None
            self._machine = {
                "provider": PROVIDER,
                "instance_type": machine_type,
                "capacity": str(capacity),
                "provisioning_model": model,
                "region": region,
                "zone": zone,
                "pool": pool_identity(machine_type, capacity, region=region, zone=zone)
                if machine_type and region
                else None,
            }
        return dict(self._machine)

    def close(self) -> None:
        """Stops the watchers (interrupting their hanging GETs) and waits for them."""
        self._closed = True
        for watcher in self._watchers:
            watcher.stop.set()
        for client in list(self._clients):
            client.close()
        with self._cond:
            self._cond.notify_all()
        for watcher in self._watchers:
            if watcher.thread.is_alive():
                watcher.thread.join(timeout=5.0)
        self._watchers = []
        self._clients = []

    def __repr__(self) -> str:
        return f"GcpNoticeSource(override={self.override!r})"
