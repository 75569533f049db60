"""Upload progress: bytes, rate, ETA, and whether the deadline will be met.

The node shows this to the user during a notice and decides on it: a writer that knows its
deadline says early that it will not make it (``will_miss_deadline``), instead of being cut off by
the machine going away. The projection is plain arithmetic on what was measured so far, on the
writer's clock, so tests drive it with a fake clock.
"""

from __future__ import annotations

import threading

import attrs

from portal.core import units
from portal.core.clock import Clock

__all__ = ["Progress", "ProgressTracker"]


@attrs.frozen(kw_only=True)
class Progress:
    """A snapshot of one checkpoint's upload."""

    job_id: str
    checkpoint_id: str
    bytes_in: int  # plaintext bytes the producer has written so far
    bytes_done: int  # plaintext bytes fingerprinted and stored (or found already stored)
    bytes_uploaded: int  # bytes actually sent to the store (encrypted), this checkpoint
    bytes_reused: int  # plaintext bytes of chunks already in the store (not sent again)
    chunks_done: int
    expected_bytes: int | None  # what the producer said it would write, if it said
    elapsed_s: float
    rate_bps: float | None  # plaintext bytes per second done, once measurable
    eta_s: float | None  # seconds to finish, when the total is known and a rate measured
    deadline_in_s: float | None  # seconds left before the deadline, if one was given
    will_miss_deadline: bool  # the projection says the upload ends after the deadline

    @property
    def fraction(self) -> float | None:
        if not self.expected_bytes:
            return None
        return min(1.0, self.bytes_done / self.expected_bytes)

    def describe(self) -> str:
        """One line for logs: ``120.0 MB of 512.0 MB, 80.0 MB/s, 4.9 s left``."""
        total = f" of {units.size(self.expected_bytes)}" if self.expected_bytes else ""
        rate = f", {units.rate(self.rate_bps)}" if self.rate_bps else ""
        eta = f", {self.eta_s:.1f} s left" if self.eta_s is not None else ""
        late = " (will miss the deadline)" if self.will_miss_deadline else ""
        return f"{units.size(self.bytes_done)}{total}{rate}{eta}{late}"


class ProgressTracker:
    """Counts bytes from the producer and the transfer threads; makes :class:`Progress` snapshots."""

    #: Safety margin on the projection: the manifest write and the last chunks' latency.
    margin_s = 1.0

    def __init__(
        self,
        *,
        job_id: str,
        checkpoint_id: str,
        clock: Clock,
        expected_bytes: int | None,
        deadline: float | None,
    ) -> None:
        self.job_id = job_id
        self.checkpoint_id = checkpoint_id
        self.clock = clock
        self.expected_bytes = expected_bytes
        self.deadline = deadline
        self._lock = threading.Lock()
        self._start: float | None = None  # the first write: rates measure the stream, not setup
        self.bytes_in = 0
        self.bytes_done = 0
        self.bytes_uploaded = 0
        self.bytes_reused = 0
        self.chunks_done = 0

    def wrote(self, n: int) -> None:
        with self._lock:
            if self._start is None:
                self._start = self.clock.monotonic()
            self.bytes_in += n

    def chunk_done(self, size: int, uploaded: int) -> None:
        with self._lock:
            self.bytes_done += size
            self.chunks_done += 1
            if uploaded:
                self.bytes_uploaded += uploaded
            else:
                self.bytes_reused += size

    def extra_upload(self, n: int) -> None:
        with self._lock:
            self.bytes_uploaded += n

    def snapshot(self, *, final: bool = False) -> Progress:
        with self._lock:
            now = self.clock.monotonic()
            elapsed = 0.0 if self._start is None else max(0.0, now - self._start)
            done, total = self.bytes_done, self.expected_bytes
            if final:
                total = self.bytes_in
            rate = done / elapsed if done and elapsed > 0 else None
            remaining = None if total is None else max(0, total - done)
            eta = (
                (0.0 if remaining == 0 else (remaining / rate if rate else None))
                if remaining is not None
                else None
            )
            left = None if self.deadline is None else self.deadline - self.clock.now()
            miss = False
            if left is not None:
                if left <= 0 and not final:
                    miss = True
                elif eta is not None and not final:
                    miss = eta + self.margin_s > left
            return Progress(
                job_id=self.job_id,
                checkpoint_id=self.checkpoint_id,
                bytes_in=self.bytes_in,
                bytes_done=done,
                bytes_uploaded=self.bytes_uploaded,
                bytes_reused=self.bytes_reused,
                chunks_done=self.chunks_done,
                expected_bytes=total,
                elapsed_s=elapsed,
                rate_bps=rate,
                eta_s=eta,
                deadline_in_s=left,
                will_miss_deadline=miss,
            )
