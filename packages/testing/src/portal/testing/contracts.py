"""Contract test classes every plugin of a kind must pass, ours and third parties' alike.

Each class is a set of pytest tests parameterised by a few factory methods the subclass
implements. They check behaviour callers rely on (the node, the checkpoint store, the planner),
so a plugin that passes can be dropped in without reading Portal's code.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pytest

from portal.core.domain import (
    CapacityClass,
    Decision,
    Job,
    MachineType,
    Notice,
    NoticeKind,
    Offer,
)
from portal.core.specs import (
    NoticeSource,
    PlacementContext,
    PlacementPolicy,
    StateMeasure,
    StorageBackend,
)

__all__ = ["NoticeSourceContract", "PlacementPolicyContract", "StorageBackendContract"]


class _Contract:
    """Holds a contract whole: an implementer may not quietly replace one of its tests.

    A subclass that overrides a standard test (to pass, or to skip it) must say why, with
    ``@pytest.mark.xfail(reason=...)`` on its override: the gap is then in the open, and with
    strict xfail the override fails the day the plugin starts to pass (langchain's
    ``test_no_overrides``)."""

    def test_no_overrides(self) -> None:
        silent = []
        for contract in type(self).__mro__:
            if _Contract not in contract.__bases__:
                continue
            for name, standard in vars(contract).items():
                if not name.startswith("test_") or name == "test_no_overrides":
                    continue
                mine = getattr(type(self), name)
                if mine is standard or _explained(mine):
                    continue
                silent.append(f"{contract.__name__}.{name}")
        assert not silent, (
            f"{type(self).__name__} overrides the standard test(s) {', '.join(silent)} without "
            "saying why: remove the override, or mark it @pytest.mark.xfail(reason='why this "
            "plugin cannot do it')"
        )


def _explained(test: object) -> bool:
    marks = getattr(test, "pytestmark", [])
    return any(m.name == "xfail" and m.kwargs.get("reason") for m in marks)


class NoticeSourceContract(_Contract):
    """What a notice source must do. Implement :meth:`make_source` and :meth:`announce`."""

    #: How long to keep polling for an announced notice before failing.
    notice_timeout_s: float = 10.0
    #: The poll timeout passed to ``poll`` by these tests.
    poll_timeout_s: float = 0.2

    def make_source(self) -> NoticeSource:
        """A source that watches a test platform (a fake metadata server, a directory...)."""
        raise NotImplementedError

    def announce(self, source: NoticeSource, seconds: float) -> None:
        """Make the test platform announce a preemption ``seconds`` from now."""
        raise NotImplementedError

    def withdraw(self, source: NoticeSource) -> bool:
        """Withdraw the announced notice; return False if the platform cannot withdraw one."""
        return False

    @pytest.fixture
    def source(self) -> Iterator[NoticeSource]:
        src = self.make_source()
        try:
            yield src
        finally:
            src.close()

    def _poll_until(self, source: NoticeSource, want: int = 1) -> list[Notice]:
        found: list[Notice] = []
        end = time.monotonic() + self.notice_timeout_s
        while time.monotonic() < end and len(found) < want:
            found.extend(source.poll(self.poll_timeout_s))
        return found

    def test_has_a_name(self, source: NoticeSource) -> None:
        assert isinstance(source.name, str) and source.name

    def test_detects_its_platform(self, source: NoticeSource) -> None:
        assert source.detect() is True

    def test_reports_nothing_before_a_notice(self, source: NoticeSource) -> None:
        assert list(source.poll(self.poll_timeout_s)) == []

    def test_waits_its_timeout_when_nothing_changed(self, source: NoticeSource) -> None:
        """``poll`` blocks (on its endpoint, or reading it again meanwhile) until a change or
        its timeout: a source that returns at once with nothing makes every caller that polls
        it in a loop spin a core (one written from the docs did: 45% CPU on a node)."""
        source.poll(self.poll_timeout_s)
        started = time.monotonic()
        assert list(source.poll(self.poll_timeout_s)) == []
        waited = time.monotonic() - started
        assert waited >= self.poll_timeout_s / 2, (
            f"poll({self.poll_timeout_s}) returned nothing after {waited:.3f} s: it must wait "
            "for a change up to its timeout"
        )

    def test_reports_an_announced_notice_once(self, source: NoticeSource) -> None:
        source.poll(self.poll_timeout_s)
        before = time.time()
        self.announce(source, 90.0)
        notices = self._poll_until(source)
        assert len(notices) == 1, f"expected one notice, got {notices}"
        notice = notices[0]
        assert isinstance(notice, Notice)
        assert notice.kind in set(NoticeKind)
        assert not notice.cancelled
        assert notice.source == source.name
        # The deadline is the announced one, give or take clock granularity of the platform.
        assert before + 90.0 - 5.0 <= notice.deadline <= time.time() + 90.0 + 5.0
        again: list[Notice] = []
        for _ in range(3):
            again.extend(source.poll(self.poll_timeout_s))
        assert again == [], f"a notice must be reported once, got again {again}"

    def test_reports_a_withdrawal_once(self, source: NoticeSource) -> None:
        source.poll(self.poll_timeout_s)
        self.announce(source, 60.0)
        (notice,) = self._poll_until(source)
        if not self.withdraw(source):
            pytest.skip("this platform cannot withdraw a notice")
        withdrawn = self._poll_until(source)
        assert [(n.id, n.cancelled) for n in withdrawn] == [(notice.id, True)]

    def test_close_is_idempotent(self) -> None:
        src = self.make_source()
        src.close()
        src.close()


class StorageBackendContract(_Contract):
    """What a storage backend must do. Implement :meth:`make_backend` (an empty root)."""

    def make_backend(self) -> StorageBackend:
        raise NotImplementedError

    @pytest.fixture
    def backend(self) -> StorageBackend:
        return self.make_backend()

    def test_round_trip(self, backend: StorageBackend) -> None:
        payload = bytes(range(256)) * 64
        backend.write_bytes("jobs/j1/chunks/c0", payload)
        assert backend.read_bytes("jobs/j1/chunks/c0") == payload

    def test_empty_object(self, backend: StorageBackend) -> None:
        backend.write_bytes("empty", b"")
        assert backend.read_bytes("empty") == b""
        assert backend.exists("empty")

    def test_overwrite_replaces(self, backend: StorageBackend) -> None:
        backend.write_bytes("k", b"old")
        backend.write_bytes("k", b"new value")
        assert backend.read_bytes("k") == b"new value"

    def test_missing_key_raises_file_not_found(self, backend: StorageBackend) -> None:
        with pytest.raises(FileNotFoundError):
            backend.read_bytes("no/such/key")
        assert not backend.exists("no/such/key")

    def test_list_is_recursive_and_sorted(self, backend: StorageBackend) -> None:
        for key in ("a/2", "a/1", "a/b/3", "c/4"):
            backend.write_bytes(key, key.encode())
        assert backend.list("a/") == ["a/1", "a/2", "a/b/3"]
        assert backend.list("nothing/") == []

    def test_delete_is_idempotent(self, backend: StorageBackend) -> None:
        backend.write_bytes("d", b"x")
        backend.delete("d")
        backend.delete("d")
        assert not backend.exists("d")

    def test_write_new_writes_only_where_nothing_is(self, backend: StorageBackend) -> None:
        """The optional conditional write volumes' commits rest on: a second ``write_new`` of
        a key raises :class:`FileExistsError` and leaves the first object as it was."""
        write_new = getattr(backend, "write_new", None)
        if write_new is None:
            pytest.skip("this backend has no write_new: volumes cannot be committed to it")
        write_new("volumes/v/versions/0000000001", b"first")
        with pytest.raises(FileExistsError):
            write_new("volumes/v/versions/0000000001", b"second")
        assert backend.read_bytes("volumes/v/versions/0000000001") == b"first"
        assert backend.list("volumes/v/") == ["volumes/v/versions/0000000001"]


def _sample_offers() -> list[Offer]:
    small = MachineType(provider="test", name="small", vcpus=2, memory_gib=8)
    large = MachineType(provider="test", name="large", vcpus=32, memory_gib=128)
    return [
        Offer(
            machine_type=small,
            region="r1",
            capacity=CapacityClass.SPOT,
            price_per_hour=0.02,
            notice_s=120,
        ),
        Offer(
            machine_type=small, region="r1", capacity=CapacityClass.ON_DEMAND, price_per_hour=0.08
        ),
        Offer(
            machine_type=large,
            region="r1",
            capacity=CapacityClass.SPOT,
            price_per_hour=0.40,
            notice_s=30,
        ),
        Offer(
            machine_type=large, region="r2", capacity=CapacityClass.ON_DEMAND, price_per_hour=1.60
        ),
    ]


class PlacementPolicyContract(_Contract):
    """What a placement policy must do. Implement :meth:`make_policy`."""

    def make_policy(self) -> PlacementPolicy:
        raise NotImplementedError

    def job(self) -> Job:
        return Job(id="job-1", script="train.py", workdir="/tmp/w", created_at=0.0, memory_gib=4)

    def test_one_decision_per_offer_naming_the_policy(self) -> None:
        policy = self.make_policy()
        offers = _sample_offers()
        decisions = policy.evaluate(self.job(), offers, PlacementContext())
        assert all(isinstance(d, Decision) for d in decisions)
        assert {id(d.offer) for d in decisions if d.offer is not None} == {id(o) for o in offers}
        assert all(d.policy == policy.name and d.reason for d in decisions)

    def test_never_uses_an_excluded_pool(self) -> None:
        policy = self.make_policy()
        offers = _sample_offers()
        context = PlacementContext(excluded_pools=frozenset(o.pool for o in offers))
        decisions = policy.evaluate(self.job(), offers, context)
        assert not [d for d in decisions if d.verdict == "use"]

    def test_is_deterministic(self) -> None:
        policy = self.make_policy()
        offers: Sequence[Offer] = _sample_offers()
        context = PlacementContext(
            state=StateMeasure(bytes=2 * 2**30, figure="its checkpoint as stored")
        )
        assert policy.evaluate(self.job(), offers, context) == policy.evaluate(
            self.job(), offers, context
        )
