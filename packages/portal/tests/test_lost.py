"""The lost-job rules, by example and property-based."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from portal.control.lost import LostJobRules, ProviderCheck

RULES = LostJobRules()
T0 = 1_000_000.0  # node last heard


def gone(*offsets: float) -> list[ProviderCheck]:
    return [ProviderCheck(at=T0 + o, gone=True) for o in offsets]


def test_a_heard_node_is_not_silent() -> None:
    a = RULES.assess(now=T0 + 10, last_heard=T0, checks=gone(5, 8))
    assert not a.lost and not a.silent and a.waiting_for == ""


def test_provider_saying_gone_once_is_not_enough() -> None:
    a = RULES.assess(now=T0 + 3600, last_heard=T0, checks=gone(100))
    assert not a.lost
    assert "say again at its next check, about a minute later" in a.waiting_for
    assert "last heard" in a.waiting_for


def test_confirmed_but_before_ten_minutes_of_silence() -> None:
    a = RULES.assess(now=T0 + 300, last_heard=T0, checks=gone(100, 160))
    assert not a.lost and a.declare_after == T0 + 600
    assert "said twice" in a.waiting_for and "10 minutes of silence" in a.waiting_for


def test_confirmed_and_ten_minutes_of_silence_is_lost() -> None:
    a = RULES.assess(now=T0 + 600, last_heard=T0, checks=gone(100, 160))
    assert a.lost


def test_with_a_notice_two_minutes_past_the_deadline() -> None:
    deadline = T0 + 60
    early = RULES.assess(
        now=deadline + 119, last_heard=T0, checks=gone(70, 130), notice_deadline=deadline
    )
    assert not early.lost and "2 minutes past its notice's deadline" in early.waiting_for
    assert RULES.assess(
        now=deadline + 120, last_heard=T0, checks=gone(70, 130), notice_deadline=deadline
    ).lost


def test_a_present_answer_starts_over() -> None:
    checks = [*gone(100), ProviderCheck(at=T0 + 160, gone=False), *gone(220)]
    assert not RULES.assess(now=T0 + 3600, last_heard=T0, checks=checks).lost


def test_reports_before_the_node_went_silent_do_not_count() -> None:
    # Said gone twice while the node was still heard: the machine evidently was not gone.
    checks = gone(-120, -60)
    assert not RULES.assess(now=T0 + 3600, last_heard=T0, checks=checks).lost


def test_two_quick_reports_need_a_third_a_minute_on() -> None:
    assert not RULES.assess(now=T0 + 3600, last_heard=T0, checks=gone(100, 110)).lost
    assert RULES.assess(now=T0 + 3600, last_heard=T0, checks=gone(100, 110, 150)).lost


checks_strategy = st.lists(
    st.builds(ProviderCheck, at=st.floats(T0 - 600, T0 + 7200), gone=st.booleans()), max_size=8
)


@given(checks_strategy, st.floats(0, 7200), st.none() | st.floats(T0, T0 + 600))
def test_never_lost_without_two_silent_gone_reports_a_minute_apart(
    checks: list[ProviderCheck], later: float, deadline: float | None
) -> None:
    a = RULES.assess(now=T0 + later, last_heard=T0, checks=checks, notice_deadline=deadline)
    if a.lost:
        silent_gone = sorted(c.at for c in checks if c.gone and c.at > T0)
        assert silent_gone and silent_gone[-1] - silent_gone[0] >= RULES.confirm_gap_s
        earliest = deadline + 120 if deadline is not None else T0 + 600
        assert T0 + later >= earliest
    else:
        assert a.waiting_for or not a.silent


@given(checks_strategy, st.floats(0, 7200))
def test_lost_is_monotonic_in_time(checks: list[ProviderCheck], later: float) -> None:
    """Once lost at some time with given facts, it stays lost later with the same facts."""
    if RULES.assess(now=T0 + later, last_heard=T0, checks=checks).lost:
        assert RULES.assess(now=T0 + later + 60, last_heard=T0, checks=checks).lost
