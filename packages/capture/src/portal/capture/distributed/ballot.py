"""Where every rank of a multi-process job pauses: one ballot, decided atomically.

A rank at a safe point of its own code has no collective in flight: what it issued, it
completed. So if it stands at count ``c`` (its issued collectives, one entry per process
group), every peer has issued at least ``c``; a peer that issued more is inside collective
``c+1`` and blocked until this rank issues it too. The ranks pause where they all stand at the
same count, and nowhere else:

1. **join**: at a safe point, a rank writes ``at[rank] = count``; the join that makes the
   entries agree (in each process group, every member at the same count) also writes
   ``decided``, in the same step;
2. **wait**: it polls; ``decided`` means capture. A peer whose published issued count is above
   this rank's is inside the next collective and needs this rank: the rank **leaves** (removes
   its entry) and runs on, to join again at a later safe point;
3. a leave happens only while nothing is decided, in the same step that checks it. If the
   ballot was decided meanwhile, the rank captures instead.

Join, leave and decide are each one compare-and-set of the one key that holds the whole ballot
(``torch.distributed.Store.compare_set``, or any store with its semantics): there is no moment
at which a rank has left but a decision counts it. That moment is how a first version hung: a
decided rank issued its drain barrier, a peer read that barrier as "a peer is in the next
collective", withdrew without looking at the decision, and entered its next all-reduce against
the barrier.

A rank that never reaches an agreeable safe point (its state cannot be pickled, the program
ends) does not hang its peers: each waits until the notice's deadline at most, then leaves and
runs on (:func:`agree`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Literal, Protocol

import attrs

__all__ = [
    "NOT_MEMBER",
    "Ballot",
    "BallotState",
    "Count",
    "LocalStore",
    "Store",
    "agree",
    "agreeing",
    "is_ahead",
]

#: A rank's collectives issued, one entry per process group, in the order the groups were made;
#: :data:`NOT_MEMBER` where the rank is not in the group (it issues nothing there).
Count = tuple[int, ...]
#: A count's entry for a group the rank is not a member of.
NOT_MEMBER = -1


class Store(Protocol):
    """What the ballot needs of a key-value store: ``torch.distributed.Store``'s methods."""

    def set(self, key: str, value: str | bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def compare_set(self, key: str, expected: str, desired: str) -> bytes: ...

    def check(self, keys: list[str]) -> bool: ...


class LocalStore:
    """An in-process store with ``torch.distributed.Store``'s compare-and-set semantics, for
    ranks that are threads (and the ballot's model test): ``compare_set`` sets ``desired`` when
    the key holds ``expected``, or is missing and ``expected`` is empty, and answers with the
    value the key then holds (a missing key and a failed comparison answer ``expected``)."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def set(self, key: str, value: str | bytes) -> None:
        with self._lock:
            self._data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        with self._lock:
            return self._data[key]

    def check(self, keys: list[str]) -> bool:
        with self._lock:
            return all(k in self._data for k in keys)

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        with self._lock:
            current = self._data.get(key)
            if (current is None and expected == "") or current == expected.encode():
                self._data[key] = desired.encode()
                return self._data[key]
            return current if current is not None else expected.encode()


@attrs.frozen
class BallotState:
    """The ballot as one value: who stands where, and what was decided."""

    at: Mapping[int, Count] = attrs.field(factory=dict)
    decided: Count | None = None

    def encode(self) -> str:
        return json.dumps(
            {
                "at": {str(r): list(c) for r, c in sorted(self.at.items())},
                "decided": None if self.decided is None else list(self.decided),
            },
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, raw: bytes) -> BallotState:
        data = json.loads(raw)
        decided = data.get("decided")
        return cls(
            at={int(r): tuple(c) for r, c in data.get("at", {}).items()},
            decided=None if decided is None else tuple(decided),
        )


def is_ahead(peer: Count, mine: Count) -> bool:
    """Whether a peer has issued a collective this rank has not, in a group both are in."""
    return any(
        p > m for p, m in zip(peer, mine, strict=True) if p != NOT_MEMBER and m != NOT_MEMBER
    )


def agreeing(counts: Collection[Count]) -> Count | None:
    """The cut ``counts`` make when they agree, else None: they agree when, in each group,
    every member stands at the same count (ranks outside a group have no say in it). The cut
    is each group's count (:data:`NOT_MEMBER` for a group no rank is in)."""
    cut: list[int] = []
    for entries in zip(*counts, strict=True):
        members = {e for e in entries if e != NOT_MEMBER}
        if len(members) > 1:
            return None
        cut.append(members.pop() if members else NOT_MEMBER)
    return tuple(cut)


class Ballot:
    """One pause's ballot in ``store`` under ``key``, for ``world_size`` ranks."""

    def __init__(
        self,
        store: Store,
        world_size: int,
        *,
        key: str = "portal/ballot",
        issued_key: str | None = None,
    ) -> None:
        """``issued_key``: where the ranks publish their issued counts (default: beside the
        ballot; several ballots in a row may share one)."""
        if world_size < 1:
            raise ValueError(f"a ballot needs at least one rank, not {world_size}")
        self.store = store
        self.world_size = world_size
        self.key = key
        self._issued_key = issued_key or f"{key}/issued"

    def open(self) -> None:
        """Make the empty ballot (once: opening it again keeps what it holds)."""
        self.store.compare_set(self.key, "", BallotState().encode())

    def state(self) -> BallotState:
        return BallotState.decode(self.store.get(self.key))

    def _update(self, change: Callable[[BallotState], BallotState]) -> BallotState:
        """Apply ``change`` as one compare-and-set, again until no other rank wrote between."""
        while True:
            raw = self.store.get(self.key)
            new = change(BallotState.decode(raw)).encode()
            got = self.store.compare_set(self.key, raw.decode(), new)
            if got == new.encode():
                return BallotState.decode(got)

    def join(self, rank: int, count: Count) -> BallotState:
        """Stand at ``count``; decide when every rank stands at it. Joining a decided ballot
        changes nothing (the decision stands)."""
        self._check_rank(rank)

        def join(state: BallotState) -> BallotState:
            if state.decided is not None:
                return state
            at = {**state.at, rank: tuple(count)}
            cut = agreeing(list(at.values())) if len(at) == self.world_size else None
            return BallotState(at=at, decided=cut)

        return self._update(join)

    def leave(self, rank: int) -> bool:
        """Stop standing, unless the ballot is decided: True when the rank left (it runs on),
        False when a decision came first (it must pause)."""
        self._check_rank(rank)
        left = True

        def leave(state: BallotState) -> BallotState:
            nonlocal left
            if state.decided is not None:
                left = False
                return state
            left = True
            return BallotState(at={r: c for r, c in state.at.items() if r != rank})

        self._update(leave)
        return left

    def publish_issued(self, rank: int, count: Count) -> None:
        """What this rank has issued now (its control thread writes it while a pause is due)."""
        self._check_rank(rank)
        self.store.set(f"{self._issued_key}/{rank}", json.dumps(list(count)))

    def issued(self) -> dict[int, Count]:
        """Every rank's last published issued count (ranks that published none are absent)."""
        found: dict[int, Count] = {}
        for rank in range(self.world_size):
            key = f"{self._issued_key}/{rank}"
            if self.store.check([key]):
                found[rank] = tuple(json.loads(self.store.get(key)))
        return found

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is not one of the {self.world_size} ranks")


Outcome = Literal["pause", "run-on"]


def agree(
    ballot: Ballot,
    rank: int,
    count: Count,
    *,
    deadline: float,
    poll_s: float = 0.002,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    peers: Callable[[], Mapping[int, Count]] | None = None,
) -> Outcome:
    """A rank at a safe point with nothing in flight, standing at ``count``: ``"pause"`` when
    every rank agreed on it, ``"run-on"`` when a peer is already inside the next collective
    (it needs this rank) or the ``deadline`` (``clock``'s time) passed without agreement.
    ``peers``: the ranks' issued counts (default: what they published to the ballot)."""
    read_peers = peers or ballot.issued
    state = ballot.join(rank, count)
    while True:
        if state.decided is not None:
            return (
                "pause" if state.at.get(rank) == tuple(count) else _decided_elsewhere(state, count)
            )
        ahead = any(is_ahead(c, count) for r, c in read_peers().items() if r != rank)
        if ahead or clock() >= deadline:
            return "run-on" if ballot.leave(rank) else "pause"
        sleep(poll_s)
        state = ballot.state()


def _decided_elsewhere(state: BallotState, count: Count) -> Outcome:
    """A decision without this rank standing at ``count``: impossible when every rank goes
    through :meth:`Ballot.join` (a decision needs every rank in the ballot, and no rank leaves
    a decided one)."""
    raise AssertionError(f"ballot decided {state.decided} while this rank stood at {count}")
