"""A conformance fake of the EC2 instance metadata service (IMDSv2) for tests, on 127.0.0.1.

Written from AWS' documented behaviour, because no emulator serves the spot notice paths (moto's
IMDS answers 500 there). Shipped in the package so that tests elsewhere, and third-party plugins,
can drive the same fake::

    from portal.providers.aws.testing import FakeIMDS

    with FakeIMDS() as imds:
        source = AwsNoticeSource(endpoint=imds.url)
        imds.preempt(in_seconds=120)
        imds.fail_next(503)      # faults come from portal.providers.base.testing

What it models: IMDSv2 tokens (PUT with a TTL, 401 without or with an expired token, 400 for a bad
TTL, 403 for ``X-Forwarded-For``), IMDS turned off (403 everywhere), ``spot/instance-action`` and
the legacy ``spot/termination-time`` (404 until a notice), the rebalance recommendation, scheduled
maintenance (``[]`` when none; ``active``/``completed``/``canceled``), and the static documents
(instance type, life cycle, zone, region). ``skew_s`` moves the fake's clock to test clock skew.
"""

from __future__ import annotations

import calendar
import datetime as dt
import json
import secrets
import time
from typing import Any

from portal.providers.base.testing import FakeHTTPServer, RecordedRequest, Reply

__all__ = ["FakeIMDS"]

_META = "/latest/meta-data/"


def iso_time(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def maintenance_time(epoch: float) -> str:
    t = dt.datetime.fromtimestamp(epoch, dt.UTC)
    return f"{t.day} {calendar.month_abbr[t.month]} {t.year} {t:%H:%M:%S} GMT"


class FakeIMDS(FakeHTTPServer):
    """The EC2 instance metadata service, scriptable from tests."""

    def __init__(
        self,
        *,
        instance_type: str = "m5.large",
        life_cycle: str = "spot",
        zone: str = "us-east-1a",
        skew_s: float = 0.0,
        instance_id: str = "i-0123456789abcdef0",
    ) -> None:
        super().__init__()
        self.instance_id = instance_id
        self.instance_type = instance_type
        self.life_cycle = life_cycle
        self.zone = zone
        self.skew_s = skew_s
        self.disabled = False
        self.instance_action: dict[str, str] | None = None
        self.termination_time: str | None = None
        self.rebalance: dict[str, str] | None = None
        self.maintenance: list[dict[str, Any]] = []
        self._tokens: dict[str, float] = {}  # token -> monotonic expiry
        self.tokens_issued = 0

    def now(self) -> float:
        return time.time() + self.skew_s

    # --- scripting ------------------------------------------------------------------------------

    def preempt(
        self, in_seconds: float = 120.0, *, action: str = "terminate", legacy: bool = True
    ) -> str:
        """Announce a spot interruption ``in_seconds`` from now; returns its time as EC2 states it."""
        when = iso_time(self.now() + in_seconds)
        with self.lock:
            self.instance_action = {"action": action, "time": when}
            if legacy and action == "terminate":
                self.termination_time = when
        self.changed()
        return when

    def cancel(self) -> None:
        """Remove the interruption documents (EC2 does not withdraw them; a source must not
        take their absence as a withdrawal)."""
        with self.lock:
            self.instance_action = None
            self.termination_time = None
        self.changed()

    def recommend_rebalance(self) -> str:
        when = iso_time(self.now())
        with self.lock:
            self.rebalance = {"noticeTime": when}
        return when

    def schedule_maintenance(
        self,
        *,
        code: str = "system-reboot",
        in_seconds: float = 3600.0,
        event_id: str | None = None,
    ) -> str:
        """Add an active scheduled event; returns its EventId."""
        event_id = event_id or f"instance-event-{secrets.token_hex(8)}"
        start = self.now() + in_seconds
        with self.lock:
            self.maintenance.append(
                {
                    "NotBefore": maintenance_time(start),
                    "NotAfter": maintenance_time(start + 7200),
                    "Code": code,
                    "Description": f"scheduled {code} (fake)",
                    "EventId": event_id,
                    "State": "active",
                }
            )
        return event_id

    def set_maintenance_state(self, event_id: str, state: str) -> None:
        """``canceled`` or ``completed`` withdraw the event's notice."""
        with self.lock:
            for event in self.maintenance:
                if event["EventId"] == event_id:
                    event["State"] = state
                    return
        raise KeyError(event_id)

    def expire_tokens(self) -> None:
        """Every token issued so far becomes invalid (as after its TTL): the next GET gets 401."""
        with self.lock:
            self._tokens.clear()

    # --- the service ------------------------------------------------------------------------------

    def respond(self, request: RecordedRequest) -> Reply:
        with self.lock:
            if self.disabled:
                return Reply(403, b"Forbidden")
            if request.path == "/latest/api/token":
                return self._token(request)
            if not request.path.startswith("/latest/"):
                return Reply(404, b"Not Found")
            if request.method != "GET":
                return Reply(405, b"Method Not Allowed")
            token = request.header("x-aws-ec2-metadata-token")
            expiry = self._tokens.get(token or "")
            if expiry is None or expiry < time.monotonic():
                return Reply(401, b"Unauthorized")
            body = self._document(request.path)
        if body is None:
            return Reply(404, b"Not Found")
        return Reply(200, body.encode())

    def _token(self, request: RecordedRequest) -> Reply:
        if request.method != "PUT":
            return Reply(405, b"Method Not Allowed")
        if request.header("x-forwarded-for") is not None:
            return Reply(403, b"Forbidden")
        ttl_text = request.header("x-aws-ec2-metadata-token-ttl-seconds") or ""
        if not ttl_text.isdigit() or not 1 <= int(ttl_text) <= 21600:
            return Reply(400, b"Bad Request")
        token = "AQAEA" + secrets.token_urlsafe(40)
        self._tokens[token] = time.monotonic() + int(ttl_text)
        self.tokens_issued += 1
        return Reply(200, token.encode(), {"X-aws-ec2-metadata-token-ttl-seconds": ttl_text})

    def _document(self, path: str) -> str | None:
        if not path.startswith(_META):
            return None
        key = path[len(_META) :]
        region = self.zone[:-1]
        static = {
            "instance-type": self.instance_type,
            "instance-life-cycle": self.life_cycle,
            "placement/availability-zone": self.zone,
            "placement/region": region,
            "instance-id": self.instance_id,
        }
        if key in static:
            return static[key]
        if key == "spot/instance-action" and self.instance_action is not None:
            return json.dumps(self.instance_action)
        if key == "spot/termination-time" and self.termination_time is not None:
            return self.termination_time
        if key == "events/recommendations/rebalance" and self.rebalance is not None:
            return json.dumps(self.rebalance)
        if key == "events/maintenance/scheduled":
            return json.dumps(self.maintenance, indent=2)
        return None
