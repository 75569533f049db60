"""The pause ballot of multi-process jobs, model-checked over random interleavings (hypothesis
stateful testing): W ranks run the same program of N collectives, any rank may step at any
moment, safe points may be unagreeable on some ranks (state that cannot be pickled there), and
a decided rank issues its drain barrier at once. Whatever the order:

- never two decisions, and a decision only where every rank stood;
- a paused rank stands at the decision, and after one no rank runs into another collective;
- never a rank waiting on a rank that waits on it: when no rank can move, the pause is waiting
  for a rank that finished the program (its peers then run on at the deadline).

The ballot under test is the real :class:`Ballot` over :class:`LocalStore`, which has
``torch.distributed.Store.compare_set``'s semantics; ``test_ballot_torch.py`` runs it over
torch's own stores.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from portal.capture.distributed.ballot import Ballot, LocalStore, is_ahead

RUNNING, IN_COLLECTIVE, WAITING, CHECKING, LEAVING, PAUSED, DONE = (
    "running",
    "in",
    "waiting",  # stands in the ballot; its next look reads the decision
    "checking",  # saw no decision; its next look reads the peers' issued counts
    "leaving",  # saw a peer ahead and is about to leave: other ranks may act in between
    "paused",
    "done",
)


class Ranks(RuleBasedStateMachine):
    @initialize(
        world=st.integers(2, 4),
        collectives=st.integers(0, 5),
        unagreeable=st.sets(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=4),
    )
    def start(self, world: int, collectives: int, unagreeable: set[tuple[int, int]]) -> None:
        self.world = world
        self.collectives = collectives
        self.unagreeable = unagreeable  # (rank, count): that rank's safe points there fail
        self.ballot = Ballot(LocalStore(), world)
        self.ballot.open()
        self.issued = [0] * world
        self.phase = [RUNNING] * world
        self.standing: dict[int, tuple[int]] = {}
        self.first_decision: tuple[int, ...] | None = None
        for rank in range(world):
            self.ballot.publish_issued(rank, (0,))

    # --- what a rank may do -------------------------------------------------------------------

    def _issue(self, rank: int) -> None:
        self.issued[rank] += 1
        self.ballot.publish_issued(rank, (self.issued[rank],))

    def _ahead(self, rank: int) -> bool:
        mine = self.standing[rank]
        return any(is_ahead(c, mine) for r, c in self.ballot.issued().items() if r != rank)

    def _enabled(self, rank: int, *, progress: bool = False) -> list[str]:
        """The moves ``rank`` can make; ``progress``: only those that change more than a
        waiting rank's look (a look that finds nothing is polling, not progress)."""
        phase, issued = self.phase[rank], self.issued[rank]
        moves = []
        if phase == RUNNING:
            if (rank, issued) not in self.unagreeable:
                moves.append("safe point")
            moves.append("issue" if issued < self.collectives else "finish")
        elif phase == IN_COLLECTIVE and min(self.issued) >= issued:
            moves.append("complete")
        elif phase == WAITING:
            if not progress or self.ballot.state().decided is not None or self._ahead(rank):
                moves.append("look")
        elif phase == CHECKING:
            if not progress or self._ahead(rank):
                moves.append("peers")
        elif phase == LEAVING:
            moves.append("leave")
        return moves

    @rule(pick=st.integers(0, 3), choice=st.integers(0, 2))
    def step(self, pick: int, choice: int) -> None:
        rank = pick % self.world
        moves = self._enabled(rank)
        if not moves:
            return
        move = moves[choice % len(moves)]
        if move == "safe point":
            count = (self.issued[rank],)
            self.standing[rank] = count
            self.phase[rank] = WAITING
            if self.ballot.join(rank, count).decided == count:
                self._pause(rank)
        elif move == "issue":
            self._issue(rank)
            self.phase[rank] = IN_COLLECTIVE
        elif move == "complete":
            self.phase[rank] = RUNNING
        elif move == "finish":
            self.phase[rank] = DONE
        elif move == "look":  # as agree() polls: the decision first, then the peers
            state = self.ballot.state()
            if state.decided is not None:
                assert state.decided == self.standing[rank]
                self._pause(rank)
            else:
                self.phase[rank] = CHECKING
        elif move == "peers":
            self.phase[rank] = LEAVING if self._ahead(rank) else WAITING
        elif move == "leave":
            if self.ballot.leave(rank):
                self.phase[rank] = RUNNING
                del self.standing[rank]
            else:  # decided between the look and the leave: the leave refused
                self._pause(rank)

    def _pause(self, rank: int) -> None:
        self.phase[rank] = PAUSED
        self._issue(rank)  # the drain barrier, issued at once: peers must not take it as work

    @rule(pick=st.integers(0, 3))
    def deadline(self, pick: int) -> None:
        """The notice's deadline for one waiting rank: it leaves unless decided, and runs on.
        Taken only when nothing else can move (the deadline is long against a step)."""
        if any(self._enabled(r, progress=True) for r in range(self.world)):
            return
        rank = pick % self.world
        if self.phase[rank] not in (WAITING, CHECKING):
            return
        if self.ballot.leave(rank):
            self.phase[rank] = RUNNING
            del self.standing[rank]
        else:
            self._pause(rank)

    # --- what must hold whatever the order ----------------------------------------------------

    @invariant()
    def one_decision_where_everyone_stood(self) -> None:
        state = self.ballot.state()
        if state.decided is None:
            return
        if self.first_decision is None:
            self.first_decision = state.decided
        assert state.decided == self.first_decision
        assert len(state.at) == self.world
        assert set(state.at.values()) == {state.decided}

    @invariant()
    def paused_ranks_stand_at_the_decision_and_no_one_runs_past_it(self) -> None:
        decided = self.ballot.state().decided
        paused = [r for r in range(self.world) if self.phase[r] == PAUSED]
        if paused:
            assert decided is not None
            assert all(self.standing[r] == decided for r in paused)
        if decided is not None:
            assert all(
                self.phase[r] in (WAITING, CHECKING, LEAVING, PAUSED) for r in range(self.world)
            )

    @invariant()
    def no_rank_waits_on_a_rank_that_waits_on_it(self) -> None:
        if all(p in (PAUSED, DONE) for p in self.phase):
            return
        if not any(self._enabled(r, progress=True) for r in range(self.world)):
            assert DONE in self.phase, (self.phase, self.issued, self.ballot.state())


TestBallotModel = Ranks.TestCase
TestBallotModel.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    # A loaded machine (CI runs other suites beside) must not turn slowness into a failure.
    suppress_health_check=[HealthCheck.too_slow],
)


def test_one_rank_agrees_with_itself_at_once() -> None:
    from portal.capture.distributed.ballot import agree

    ballot = Ballot(LocalStore(), 1)
    ballot.open()
    assert agree(ballot, 0, (3,), deadline=0.0) == "pause"


def test_a_rank_alone_in_the_ballot_runs_on_at_the_deadline() -> None:
    """Its peer finished the program (or never reaches an agreeable safe point): the rank
    waits until the notice's deadline, leaves, and runs on; the ballot holds no one."""
    from portal.capture.distributed.ballot import agree

    ballot = Ballot(LocalStore(), 2)
    ballot.open()
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    assert agree(ballot, 0, (7,), deadline=1.0, clock=lambda: now[0], sleep=sleep) == "run-on"
    assert now[0] >= 1.0
    assert ballot.state().at == {} and ballot.state().decided is None


def test_bad_ranks_and_worlds_are_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="at least one rank"):
        Ballot(LocalStore(), 0)
    ballot = Ballot(LocalStore(), 2)
    ballot.open()
    with pytest.raises(ValueError, match="rank 2 is not one of the 2 ranks"):
        ballot.join(2, (1,))
    ballot.open()  # again: what it holds is kept
    assert ballot.join(0, (1,)).at == {0: (1,)}
    ballot.open()
    assert ballot.state().at == {0: (1,)}
