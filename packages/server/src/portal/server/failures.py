"""Failed authentications, per source address: a limit, and a log of them in aggregate.

A request with no token, or an unknown, revoked or expired one, cost the server a refusal and a
warning line each, for ever: a script with a revoked token in a loop, a node whose job token
expired, or a scanner filled the log at the rate it sent. Now each address may fail
``per_minute`` times a minute (a token bucket: bursts of that many, then one every
``60 / per_minute`` s); past that its bad-token requests are answered ``429 RATE_LIMITED`` with
``Retry-After``, and its failures are logged as counts, one line per address per minute.

A request with a valid token is served whatever its address did: addresses are shared (a NAT
gateway in front of a fleet's private subnet, an office's proxy), and one node with an expired
token must not cut every other node behind the same address off the control plane. Checking a
token costs a hash and a lookup; guessing one (32 random bytes, see :mod:`portal.server.tokens`)
is hopeless at any rate, so serving valid tokens gives an attacker nothing.

An address is the client's IP address as uvicorn reports it (the ``X-Forwarded-For`` of a proxy
on 127.0.0.1 included); an IPv6 client is counted by its /64, which a single host is commonly
given whole.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable

import attrs

from portal.server.buckets import OVERFLOW, TokenBuckets

__all__ = ["AUTH_FAILURES_PER_MIN", "FailureLimit", "FailureLog", "source_of"]

#: Failed authentications a minute each address may make (bursts of as many): a person mistyping
#: a token, or a few nodes with an old one, stay well under it.
AUTH_FAILURES_PER_MIN = 20

#: Addresses tracked at most; the rest share one bucket (a bound on memory, whatever the clients).
MAX_ADDRESSES = 65_536


def source_of(host: str | None) -> str:
    """The address a client's failures are counted under: IPv4 as is, IPv6 by its /64."""
    if not host:
        return "(unknown address)"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host  # a name a test client gives, say
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # ::ffff:a.b.c.d, an IPv4 client of a v6 socket
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class FailureLimit(TokenBuckets):
    """A token bucket per address, taken from only by failed authentications: ``per_minute``
    a minute, bursts of as many (0: no limit)."""

    def __init__(
        self,
        per_minute: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = MAX_ADDRESSES,
    ) -> None:
        super().__init__(per_minute / 60.0, per_minute, clock=clock, max_keys=max_addresses)
        self.per_minute = per_minute

    def failed(self, address: str) -> float:
        """Count one failure of ``address``: 0 while it is under the limit, else the seconds
        until it may fail again (the request is then answered 429)."""
        return self.take(address)


@attrs.define
class _Tally:
    count: int = 0
    limited: int = 0
    last: str = ""


class FailureLog:
    """Refusals for a bad token, logged in aggregate: an address's first refusal at once (with
    its reason), then one line per period with the count of those since, for as long as it
    keeps failing. :meth:`flush` writes the counts: call it each ``period_s`` and at shutdown."""

    def __init__(self, log: logging.Logger, *, limit: FailureLimit, period_s: float = 60.0) -> None:
        self.log = log
        self.limit = limit
        self.period_s = period_s
        self._tallies: dict[str, _Tally] = {}
        self._lock = threading.Lock()

    def refused(self, address: str, why: str, *, limited: bool) -> None:
        """One request from ``address`` was refused for its token (``why``; ``limited``: with
        429, past the limit)."""
        with self._lock:
            tally = self._tallies.get(address)
            if tally is None and len(self._tallies) < MAX_ADDRESSES:
                self._tallies[address] = _Tally()
            elif tally is None:
                tally = self._tallies.setdefault(OVERFLOW, _Tally())
            if tally is not None:
                tally.count += 1
                tally.limited += limited
                tally.last = why
                return
        self.log.warning(
            "refused a request from %s for its token: %s (further refusals from %s are counted, "
            "one line a minute)",
            address,
            why,
            address,
        )

    def flush(self) -> None:
        """Log the count of each address's refusals since the last flush; an address that had
        none is forgotten (its next refusal is logged at once again)."""
        with self._lock:
            due = [(a, t) for a, t in self._tallies.items() if t.count]
            self._tallies = {a: _Tally() for a, _ in due}
        for address, tally in due:
            limited = (
                f", {tally.limited} of them answered 429 (past the limit of "
                f"{self.limit.per_minute} a minute per address)"
                if tally.limited
                else ""
            )
            self.log.warning(
                "refused %d more request%s from %s for its token in the last %s%s; the last: %s",
                tally.count,
                "" if tally.count == 1 else "s",
                address,
                _period(self.period_s),
                limited,
                tally.last,
            )


def _period(seconds: float) -> str:
    return "minute" if seconds == 60 else f"{seconds:g} s"
