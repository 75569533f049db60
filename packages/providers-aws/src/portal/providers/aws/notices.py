"""The AWS notice source: spot interruptions, rebalance recommendations and scheduled maintenance
from the EC2 instance metadata service (IMDSv2).

EC2 offers no push channel on the instance, so the source polls: ``spot/instance-action`` every
``poll_interval_s`` (1 s by default, inside AWS' advice of 5 s, because a notice is only two minutes
long), and the slower-moving documents (legacy ``spot/termination-time``, the rebalance
recommendation, scheduled maintenance) every ``slow_interval_s``. It holds an IMDSv2 token,
refreshes it before expiry and retries once on a 401.

EC2 gives notices no id, so one is derived from what identifies it (the interruption time); the
legacy ``termination-time`` and ``instance-action`` of one interruption get the same id and are
reported once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import CapacityClass, Notice, NoticeKind
from portal.core.errors import PortalError
from portal.core.specs import NoticeSourceContext
from portal.providers.aws.catalog import SPOT_NOTICE_S
from portal.providers.aws.parsing import (
    parse_instance_action,
    parse_maintenance,
    parse_rebalance,
    parse_termination_time,
)
from portal.providers.base.metadata import Answer, MetadataUnavailable
from portal.providers.base.polling import Document, PollingNoticeSource
from portal.providers.base.source import MetadataService

__all__ = ["ENDPOINT_ENV", "AwsNoticeSource", "is_ec2"]

PROVIDER = "aws"
SOURCE_NAME = "aws"
ENDPOINT_ENV = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
DEFAULT_ENDPOINT = "http://169.254.169.254"
TOKEN_PATH = "/latest/api/token"
TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
INSTANCE_ACTION = "/latest/meta-data/spot/instance-action"
TERMINATION_TIME = "/latest/meta-data/spot/termination-time"
REBALANCE = "/latest/meta-data/events/recommendations/rebalance"
MAINTENANCE = "/latest/meta-data/events/maintenance/scheduled"
#: A rebalance recommendation has no deadline; an interruption must still be announced two
#: minutes ahead, so the machine stays at least this long after the recommendation is seen.
REBALANCE_HORIZON_S = 120.0
#: A legacy termination-time further in the past than this lingers from a failed termination.
STALE_TERMINATION_S = 60.0
_HOP_LIMIT_HINT = (
    "If this runs in a container, the IMDSv2 hop limit (1 by default) drops the answer before it "
    "reaches the container: raise it with `aws ec2 modify-instance-metadata-options --instance-id "
    "ID --http-put-response-hop-limit 2`, or use host networking"
)
_DISABLED_HINT = (
    "the instance metadata service is disabled or forbidden for this instance. Turn it on with "
    "`aws ec2 modify-instance-metadata-options --instance-id ID --http-endpoint enabled`; without "
    "it Portal cannot see spot interruption notices"
)


def is_ec2(dmi: Mapping[str, str]) -> bool:
    """Whether DMI says this is an EC2 instance (Nitro: vendor; Xen: the ``ec2`` UUID, as
    cloud-init identifies AWS)."""
    vendor = (dmi.get("sys_vendor", "") + " " + dmi.get("bios_vendor", "")).lower()
    if "amazon ec2" in vendor:
        return True
    if dmi.get("product_uuid", "").lower().startswith("ec2"):
        return True
    return "amazon" in dmi.get("product_version", "").lower()


IMDS = MetadataService(
    provider=PROVIDER,
    cloud="AWS",
    platform="EC2",
    service="IMDS",
    what="AWS instance metadata (IMDS)",
    override_env=ENDPOINT_ENV,
    default_endpoint=DEFAULT_ENDPOINT,
    on_platform=is_ec2,
    hints={429: "is rate limited (HTTP 429); retrying"},
    other_status="is unavailable (HTTP {status}); retrying",
)


class AwsNoticeSource(PollingNoticeSource):
    """Watches IMDSv2 for spot interruptions, rebalance recommendations and maintenance."""

    name = SOURCE_NAME
    metadata = IMDS
    remember_withdrawn = True  # reported under notice ids: a withdrawn maintenance stays so

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        dmi_dir: str | os.PathLike[str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        poll_interval_s: float = 1.0,
        slow_interval_s: float = 5.0,
        token_ttl_s: int = 21600,
        request_timeout_s: float = 1.0,
    ) -> None:
        """``endpoint`` overrides the IMDS address (``AWS_EC2_METADATA_SERVICE_ENDPOINT``);
        without it, IMDS is contacted only if DMI (read from ``dmi_dir``) says this is EC2."""
        if not 1 <= token_ttl_s <= 21600:
            raise PortalError(f"IMDSv2 token TTL {token_ttl_s} s is not valid: give 1..21600")
        super().__init__(
            override=endpoint, dmi_dir=dmi_dir, clock=clock, request_timeout_s=request_timeout_s
        )
        self.poll_interval_s = poll_interval_s
        self.slow_interval_s = slow_interval_s
        self.token_ttl_s = token_ttl_s
        self._token: str | None = None
        self._token_expires = 0.0
        self._machine: dict[str, str | None] | None = None

    @classmethod
    def from_context(cls, context: NoticeSourceContext) -> AwsNoticeSource:
        s = context.settings
        return cls(
            endpoint=s.get("aws.metadata_endpoint") or context.environ.get(ENDPOINT_ENV) or None,
            dmi_dir=s.get("dmi_dir"),
            clock=context.clock,
            poll_interval_s=float(s.get("aws.poll_interval_s") or 1.0),
            slow_interval_s=float(s.get("aws.slow_interval_s") or 5.0),
            token_ttl_s=int(s.get("aws.token_ttl_s") or 21600),
        )

    def documents(self) -> list[Document]:
        # A 404 withdraws nothing: EC2 never withdraws an interruption or a rebalance
        # recommendation, and a maintenance list is a 200. Treating a missing document as a
        # withdrawal would let one glitch drop a real notice.
        return [
            Document(INSTANCE_ACTION, self.poll_interval_s, self._on_instance_action),
            Document(TERMINATION_TIME, self.slow_interval_s, self._on_termination_time),
            Document(REBALANCE, self.slow_interval_s, self._on_rebalance),
            Document(MAINTENANCE, self.slow_interval_s, self._on_maintenance),
        ]

    # --- IMDSv2 ------------------------------------------------------------------------------

    def _fetch_token(self) -> str:
        http = self.client()
        try:
            answer = http.request(
                "PUT",
                TOKEN_PATH,
                headers={TOKEN_TTL_HEADER: str(self.token_ttl_s)},
                timeout_s=self.request_timeout_s,
            )
        except MetadataUnavailable as exc:
            if "no answer" in exc.message:
                raise MetadataUnavailable(
                    f"{exc.message}. {_HOP_LIMIT_HINT}", details=exc.details
                ) from exc
            raise
        url = http.url(TOKEN_PATH)
        if answer.status == 403:
            raise MetadataUnavailable(f"IMDS at {url} answered 403: {_DISABLED_HINT}")
        if answer.status == 400:
            raise MetadataUnavailable(
                f"IMDS at {url} refused the token request (400): a proxy in the way adds "
                "X-Forwarded-For, which IMDSv2 rejects; reach IMDS directly (NO_PROXY does not "
                "apply: Portal never uses a proxy, so check the network path)"
            )
        token = answer.text
        if answer.status != 200 or not token or len(token) > 4096 or not token.isprintable():
            raise MetadataUnavailable(
                f"IMDS at {url} gave no usable IMDSv2 token (HTTP {answer.status}); retrying",
                details={"endpoint": url, "status": answer.status},
            )
        # Refresh a tenth of the TTL (at most a minute) early, so a token never expires mid-poll.
        margin = min(60.0, self.token_ttl_s / 10)
        self._token_expires = self.clock.monotonic() + self.token_ttl_s - margin
        self._token = token
        return token

    def fetch(self, document: Document) -> Answer:
        return self._get(document.path)

    def _get(self, path: str) -> Answer:
        """GET with the token; a 401 (expired or revoked token) gets one fresh token and retry.

        A 401 or 403 that remains is the whole service refusing, not one document: its error
        carries no status, so the round stops there.
        """
        http = self.client()
        for attempt in (1, 2):
            if self._token is None or self.clock.monotonic() >= self._token_expires:
                self._fetch_token()
            answer = http.request(
                "GET",
                path,
                headers={TOKEN_HEADER: self._token or ""},
                timeout_s=self.request_timeout_s,
            )
            if answer.status == 401 and attempt == 1:
                self._token = None
                continue
            break
        url = http.url(path)
        if answer.status == 401:
            raise MetadataUnavailable(f"IMDS at {url} refused a fresh IMDSv2 token (401); retrying")
        if answer.status == 403:
            raise MetadataUnavailable(f"IMDS at {url} answered 403: {_DISABLED_HINT}")
        return self.expect(answer, url, ok=(200, 404))

    # --- the documents -------------------------------------------------------------------------

    def _report(
        self, notice_id: str, kind: NoticeKind, deadline: float, raw: Mapping[str, object]
    ) -> list[Notice]:
        return self.report_once(notice_id, self.notice(notice_id, kind, deadline, raw))

    def _on_instance_action(self, answer: Answer) -> list[Notice]:
        action = parse_instance_action(answer.text)
        notice_id = Notice.derive_id(PROVIDER, "spot-interruption", int(action.time))
        raw = {"document": "spot/instance-action", **action.raw}
        deadline = self.local_deadline(action.time, answer)
        return self._report(notice_id, NoticeKind.PREEMPTION, deadline, raw)

    def _on_termination_time(self, answer: Answer) -> list[Notice]:
        stated = parse_termination_time(answer.text)
        if stated is None:
            return []  # AWS: a value that is not a time means no notice
        deadline = self.local_deadline(stated, answer)
        if deadline < self.clock.now() - STALE_TERMINATION_S:
            self.problems.report(
                "stale-termination-time",
                f"ignoring spot/termination-time {answer.text[:40]!r}: it is in the past, left "
                "from a termination that did not happen",
                level=logging.INFO,
            )
            return []
        notice_id = Notice.derive_id(PROVIDER, "spot-interruption", int(stated))
        raw = {"document": "spot/termination-time", "time": answer.text[:64]}
        return self._report(notice_id, NoticeKind.PREEMPTION, deadline, raw)

    def _on_rebalance(self, answer: Answer) -> list[Notice]:
        notice_time = parse_rebalance(answer.text)
        notice_id = Notice.derive_id(PROVIDER, "rebalance", int(notice_time))
        deadline = self.clock.now() + REBALANCE_HORIZON_S
        raw = {"document": "events/recommendations/rebalance", "noticeTime": answer.text[:200]}
        return self._report(notice_id, NoticeKind.REBALANCE, deadline, raw)

    def _on_maintenance(self, answer: Answer) -> list[Notice]:
        events, problems = parse_maintenance(answer.text)
        for problem in problems:
            self.problems.report(f"maintenance-entry:{problem}", f"IMDS maintenance: {problem}")
        changes: list[Notice] = []
        for event in events:
            notice_id = Notice.derive_id(PROVIDER, "maintenance", event.event_id)
            if event.state == "active":
                stated = event.not_before if event.not_before is not None else self.clock.now()
                raw = {"document": "events/maintenance/scheduled", **event.raw}
                deadline = self.local_deadline(stated, answer)
                changes += self._report(notice_id, NoticeKind.MAINTENANCE, deadline, raw)
            else:  # completed or canceled: the notice no longer holds
                why = f"event {event.event_id} {event.state}"
                changes += self.withdraw_once(notice_id, why=why)
        return changes

    # --- the machine ---------------------------------------------------------------------------

    def machine_info(self) -> dict[str, str | None]:
        """Instance type, capacity class, region and zone, read once from IMDS.

        Keys: ``provider``, ``instance_id`` (what EC2's API calls it: the lost-job rules ask
        DescribeInstances about it), ``instance_type``, ``capacity`` (``spot``/``on_demand``/
        ``reserved`` or None), ``region``, ``zone``, ``pool`` (as
        :attr:`portal.core.domain.Offer.pool`).
        """
        if self._machine is None:

            def text(path: str) -> str | None:
                answer = self._get(f"/latest/meta-data/{path}")
                if answer.status != 200:
                    return None
                return answer.text[:128] or None

            life_cycle = text("instance-life-cycle")
            capacity = {
                "spot": CapacityClass.SPOT,
                "on-demand": CapacityClass.ON_DEMAND,
                "scheduled": CapacityClass.RESERVED,
            }.get(life_cycle or "")
            zone = text("placement/availability-zone")
            region = text("placement/region") or (zone[:-1] if zone else None)
            instance_type = text("instance-type")
            self._machine = {
                "provider": PROVIDER,
                "instance_id": text("instance-id"),
                "instance_type": instance_type,
                "capacity": str(capacity) if capacity else None,
                "life_cycle": life_cycle,
                # the notice an interruption gives this machine (the check's warning says it)
                "notice_s": f"{SPOT_NOTICE_S:g}" if capacity is CapacityClass.SPOT else None,
                "region": region,
                "zone": zone,
                "pool": f"{capacity}:{PROVIDER}:{instance_type}:{zone or region}"
                if capacity and instance_type and (zone or region)
                else None,
            }
        return dict(self._machine)
