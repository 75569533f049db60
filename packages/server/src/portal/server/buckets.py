"""Token buckets by key: the server's two limits (requests per user, failed authentications per
address) are one mechanism with two keys and two rates.

Each key has a bucket of ``burst`` tokens that refills at ``rate`` a second; a request takes one.
Keys whose bucket has filled up again are as good as never seen, and are forgotten when the
table reaches ``max_keys`` (past that, new keys share one bucket: a bound on memory whatever the
clients send).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["OVERFLOW", "TokenBuckets"]

#: The key every new key shares once the table is full.
OVERFLOW = "(others)"


class TokenBuckets:
    """``rate`` tokens a second per key, ``burst`` at once; a rate of 0 or less is no limit."""

    def __init__(
        self,
        rate: float,
        burst: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 65_536,
    ) -> None:
        self.rate = rate
        self.burst = float(burst)
        self._clock = clock
        self._max = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Take a token of ``key``'s: 0 when there was one, else the seconds until there is."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        with self._lock:
            if key not in self._buckets and len(self._buckets) >= self._max:
                self._prune(now)
                if len(self._buckets) >= self._max:
                    key = OVERFLOW
            tokens, at = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate

    def prune(self) -> None:
        """Forget the keys whose bucket has filled up again."""
        with self._lock:
            self._prune(self._clock())

    def _prune(self, now: float) -> None:
        full = [
            k
            for k, (tokens, at) in self._buckets.items()
            if tokens + (now - at) * self.rate >= self.burst
        ]
        for key in full:
            del self._buckets[key]

    def __len__(self) -> int:
        return len(self._buckets)
