"""A conformance fake of the GCE metadata server for tests, on 127.0.0.1.

Written from Google's documented behaviour (no emulator of the metadata server exists), shipped so
that tests elsewhere and third-party plugins can drive the same fake::

    from portal.providers.gcp.testing import FakeGCEMetadata

    with FakeGCEMetadata() as gce:
        source = GcpNoticeSource(host=gce.host)   # what GCE_METADATA_HOST carries
        gce.preempt()
        gce.fail_next(503)        # faults come from portal.providers.base.testing

What it models: ``Metadata-Flavor: Google`` required (403 without, or with ``X-Forwarded-For``) and
sent back; an ``ETag`` on every answer, derived from the value; hanging GETs
(``wait_for_change=true``, ``last_etag``, ``timeout_sec``) that return at once when ``last_etag``
differs from the current ETag, when the value changes, or with the current value at the timeout;
``instance/preempted``, ``instance/maintenance-event``, the scheduling and placement values
(``provisioning-model`` can be made to 404, as on older VMs), 404 for anything else.
"""

from __future__ import annotations

import hashlib

from portal.providers.base.testing import FakeHTTPServer, RecordedRequest, Reply

__all__ = ["FakeGCEMetadata"]

PREFIX = "/computeMetadata/v1/"
#: A hanging GET without ``timeout_sec`` waits this long here (the real server waits much longer).
DEFAULT_HANG_S = 60.0


def etag_of(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


class FakeGCEMetadata(FakeHTTPServer):
    """The GCE metadata server, scriptable from tests."""

    def __init__(
        self,
        *,
        machine_type: str = "n2-standard-4",
        zone: str = "us-central1-a",
        provisioning_model: str | None = "SPOT",
    ) -> None:
        super().__init__()
        self.values: dict[str, str] = {
            "instance/preempted": "FALSE",
            "instance/maintenance-event": "NONE",
            "instance/machine-type": f"projects/123456789/machineTypes/{machine_type}",
            "instance/zone": f"projects/123456789/zones/{zone}",
            "instance/id": "1234567890123456789",
            "instance/name": "portal-test-vm",
            "instance/scheduling/preemptible": "TRUE" if provisioning_model == "SPOT" else "FALSE",
        }
        if provisioning_model is not None:
            self.values["instance/scheduling/provisioning-model"] = provisioning_model
        self.hanging = 0  # hanging GETs waiting now

    # --- scripting ------------------------------------------------------------------------------

    def set(self, key: str, value: str) -> None:
        """Change a value (``instance/...``); hanging GETs on it answer at once."""
        with self.lock:
            self.values[key] = value
        self.changed()

    def preempt(self, in_seconds: float | None = None) -> None:
        """Set ``instance/preempted`` to ``TRUE``. GCE states no deadline (a Spot VM stops 30 s
        later), so ``in_seconds`` is accepted for symmetry with the other fakes and ignored."""
        self.set("instance/preempted", "TRUE")

    def cancel(self) -> None:
        """Flip ``instance/preempted`` back to ``FALSE``: the notice is void."""
        self.set("instance/preempted", "FALSE")

    def maintenance(self, value: str = "TERMINATE_ON_HOST_MAINTENANCE") -> None:
        self.set("instance/maintenance-event", value)

    def end_maintenance(self) -> None:
        self.set("instance/maintenance-event", "NONE")

    def wait_for_hanging(self, count: int = 1, timeout_s: float = 5.0) -> bool:
        """Wait until ``count`` hanging GETs are waiting (so a change is seen by a hanging GET)."""
        return self.wait_for(lambda: self.hanging >= count, timeout_s)

    # --- the service ------------------------------------------------------------------------------

    def respond(self, request: RecordedRequest) -> Reply:
        flavor = {"Metadata-Flavor": "Google"}
        if request.header("metadata-flavor") != "Google" or request.header("x-forwarded-for"):
            return Reply(403, b"Missing Metadata-Flavor:Google header.", flavor, "text/html")
        if not request.path.startswith(PREFIX):
            return Reply(404, b"Not Found", flavor, "text/html")
        if request.method != "GET":
            return Reply(405, b"Method Not Allowed", flavor, "text/html")
        key = request.path[len(PREFIX) :]
        with self.lock:
            if key not in self.values:
                return Reply(404, b"Not Found", flavor, "text/html")
            if request.query.get("wait_for_change", "").lower() == "true":
                try:
                    hang_s = float(request.query.get("timeout_sec", DEFAULT_HANG_S))
                except ValueError:
                    return Reply(400, b"Bad Request: timeout_sec", flavor, "text/html")
                last = request.query.get("last_etag", "0")
                start = etag_of(self.values[key])
                if last == start:  # otherwise the caller is behind: answer at once
                    self.hanging += 1
                    self.changed()
                    try:
                        self.wait_for(lambda: etag_of(self.values.get(key, "")) != start, hang_s)
                    finally:
                        self.hanging -= 1
                        self.changed()
            value = self.values.get(key, "")
        headers = {**flavor, "ETag": etag_of(value)}
        return Reply(200, value.encode(), headers, "application/text")
