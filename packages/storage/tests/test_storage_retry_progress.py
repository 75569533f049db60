"""Transient errors are retried with back-off on the injected clock; progress and deadlines."""

from __future__ import annotations

import pytest

from portal.storage import (
    CheckpointDeadlineError,
    CheckpointStore,
    MemoryKeyStore,
    Progress,
    RetryPolicy,
    StorageUnavailableError,
)
from portal.storage.backend import open_backend
from portal.storage.retry import is_transient
from portal.testing import FakeClock


class Flaky:
    """Wraps a backend; the next ``failures`` writes raise ``error``."""

    def __init__(self, url: str, failures: int, error: Exception) -> None:
        self.inner = open_backend(url)
        self.url = self.inner.url
        self.failures = failures
        self.error = error
        self.writes = 0

    def write_bytes(self, key: str, data: bytes) -> None:
        self.writes += 1
        if self.failures > 0:
            self.failures -= 1
            raise self.error
        self.inner.write_bytes(key, data)

    def read_bytes(self, key: str) -> bytes:
        return self.inner.read_bytes(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


def test_transient_errors_are_retried_with_backoff() -> None:
    clock = FakeClock()
    backend = Flaky("memory://flaky-1", failures=3, error=ConnectionResetError("reset by peer"))
    policy = RetryPolicy(clock=clock, base_delay_s=0.5, max_delay_s=10, jitter=lambda: 1.0)
    store = CheckpointStore(backend, MemoryKeyStore(), retry=policy, clock=clock, parallelism=1)
    store.create_job_key("j")
    start = clock.monotonic()
    with store.open_writer("j") as writer:  # the intent marker write fails three times
        writer.write(b"data")
        writer.commit()
    assert clock.monotonic() - start == pytest.approx(0.5 + 1.0 + 2.0)
    assert store.open_reader("j").read_all() == b"data"


def test_exhausted_retries_say_unavailable_and_keep_the_previous_checkpoint() -> None:
    clock = FakeClock()
    backend = Flaky("memory://flaky-2", failures=0, error=TimeoutError("timed out"))
    store = CheckpointStore(
        backend,
        MemoryKeyStore(),
        clock=clock,
        chunk_size=10,
        retry=RetryPolicy(clock=clock, attempts=3),
    )
    store.create_job_key("j")
    with store.open_writer("j") as writer:
        writer.write(b"first checkpoint")
        good = writer.commit().checkpoint_id
    writer = store.open_writer("j")
    backend.failures = 10**6
    with pytest.raises(StorageUnavailableError) as info:
        writer.write(b"x" * 100)
        writer.commit()
    assert info.value.code == "STORAGE_UNAVAILABLE"
    assert "after 3 attempts" in str(info.value) and "memory://flaky-2" in str(info.value)
    backend.failures = 0
    latest = store.latest_complete("j")
    assert latest is not None and latest.checkpoint_id == good


def test_permanent_errors_are_not_retried() -> None:
    clock = FakeClock()
    backend = Flaky("memory://flaky-3", failures=1, error=PermissionError("access denied"))
    store = CheckpointStore(backend, MemoryKeyStore(), clock=clock)
    store.create_job_key("j")
    with pytest.raises(StorageUnavailableError, match="not retried"):
        store.open_writer("j")
    assert backend.writes == 1 and clock.monotonic() == 0.0
    assert is_transient(OSError(5, "EIO")) and not is_transient(FileNotFoundError())
    assert not is_transient(ValueError("bug"))


class SlowClockBackend(Flaky):
    """Every write takes ``seconds`` on the fake clock."""

    def __init__(self, url: str, clock: FakeClock, seconds: float) -> None:
        super().__init__(url, 0, OSError())
        self.clock, self.seconds = clock, seconds

    def write_bytes(self, key: str, data: bytes) -> None:
        self.clock.advance(self.seconds)
        super().write_bytes(key, data)


def test_progress_reports_rate_eta_and_a_missed_deadline() -> None:
    clock = FakeClock()
    backend = SlowClockBackend("memory://slow-1", clock, 1.0)  # 1 s per pack of one chunk
    store = CheckpointStore(
        backend, MemoryKeyStore(), clock=clock, chunk_size=1000, pack_size=1000, parallelism=1
    )
    store.create_job_key("j")
    seen: list[Progress] = []
    writer = store.open_writer(
        "j", expected_bytes=10_000, deadline=clock.now() + 5.0, on_progress=seen.append
    )
    writer.write(b"".join(bytes([i]) * 1000 for i in range(3)))  # three distinct chunks
    for future in list(writer._futures):
        future.result()
    last = seen[-1]
    assert last.bytes_done == 3000 and last.chunks_done == 3
    assert last.rate_bps == pytest.approx(1000.0)
    assert last.eta_s == pytest.approx(7.0)
    assert last.will_miss_deadline
    assert last.fraction == pytest.approx(0.3)
    # Sizes and rates worded as every other message words them (portal.core.units).
    assert last.describe() == "3.0 kB of 10.0 kB, 1.0 kB/s, 7.0 s left (will miss the deadline)"
    writer.write(b"".join(bytes([i]) * 1000 for i in range(3, 10)))  # "warn" only flags it
    ref = writer.commit()
    assert ref.size_bytes > 10_000


def test_deadline_policy_raise_stops_early() -> None:
    clock = FakeClock()
    backend = SlowClockBackend("memory://slow-2", clock, 1.0)
    store = CheckpointStore(
        backend, MemoryKeyStore(), clock=clock, chunk_size=1000, pack_size=1000, parallelism=1
    )
    store.create_job_key("j")
    writer = store.open_writer(
        "j", expected_bytes=100_000, deadline=clock.now() + 5.0, deadline_policy="raise"
    )
    with pytest.raises(CheckpointDeadlineError) as info:
        for i in range(100):
            writer.write(i.to_bytes(2, "big") * 500)
        writer.commit()
    assert info.value.code == "CHECKPOINT_DEADLINE"
    assert "previous complete checkpoint is unchanged" in str(info.value)
    assert backend.writes < 20  # it stopped early, long before the 100 chunks
    assert store.latest_complete("j") is None
