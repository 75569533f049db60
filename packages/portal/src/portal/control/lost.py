"""When a job whose node went silent is called lost — and what Portal waits for until then.

The spec: a job is lost only when its state is gone for certain. A provider that says once that
the machine is gone, or a store that cannot be read for a moment, does not end it. While its node
does not answer, the job keeps its state and the time its node was last heard, and every event
says what Portal waits for:

* the provider must say the machine is gone again at its next check, about a minute later, with
  the node still silent (a single report is not enough; a report of the machine being present, or
  the node being heard, starts over);
* the loss is declared no sooner than 10 minutes of silence — or, when the machine had a notice,
  no sooner than 2 minutes past that notice's deadline.

A suspend or move asked meanwhile is refused with the same words (:attr:`LostAssessment.waiting_for`).
This module is pure: it takes the facts and the time, so it is tested without sleeping.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from portal.core.units import clock

__all__ = ["LostAssessment", "LostJobRules", "ProviderCheck"]


@attrs.frozen(kw_only=True)
class ProviderCheck:
    """One answer of the provider about the machine: gone or still there, at a time."""

    at: float
    gone: bool


@attrs.frozen(kw_only=True)
class LostAssessment:
    lost: bool
    silent: bool
    waiting_for: str  # what Portal waits for (empty when lost or when the node is heard)
    declare_after: float | None = None  # earliest time the loss could be declared


@attrs.frozen(kw_only=True)
class LostJobRules:
    """The thresholds, named; defaults are the spec's."""

    silent_after_s: float = 30.0  # a node not heard for this long is silent
    confirm_gap_s: float = 45.0  # "about a minute later": a second report at least this far on
    min_silence_s: float = 600.0  # 10 minutes of silence
    past_deadline_s: float = 120.0  # 2 minutes past a notice's deadline

    def assess(
        self,
        *,
        now: float,
        last_heard: float,
        checks: Sequence[ProviderCheck],
        notice_deadline: float | None = None,
    ) -> LostAssessment:
        """Whether the job is lost at ``now``, and if not, what Portal waits for."""
        silence = now - last_heard
        if silence < self.silent_after_s:
            return LostAssessment(lost=False, silent=False, waiting_for="")
        heard = f"its node was last heard at {clock(last_heard)} ({silence / 60:.0f} min ago)"
        earliest = (
            notice_deadline + self.past_deadline_s
            if notice_deadline is not None
            else last_heard + self.min_silence_s
        )
        rule = (
            "10 minutes of silence"
            if notice_deadline is None
            else "2 minutes past its notice's deadline"
        )
        # Never a wait whose time has passed: once it has, only the provider is waited for.
        time_rule = (
            f", and for {rule} (until {clock(earliest)})"
            if now < earliest
            else f" ({rule} passed at {clock(earliest)})"
        )

        # Only checks made while the node was already silent count, newest last.
        silent_checks = [c for c in sorted(checks, key=lambda c: c.at) if c.at > last_heard]
        if self._confirmed_at(silent_checks) is None:
            said_once = bool(silent_checks) and silent_checks[-1].gone
            provider = (
                "the provider to say again at its next check, about a minute later, that the "
                "machine is gone"
                if said_once
                else "the provider to say twice, about a minute apart, that the machine is gone"
            )
            return LostAssessment(
                lost=False,
                silent=True,
                waiting_for=f"{heard}; Portal waits for {provider}{time_rule}",
            )
        if now < earliest:
            return LostAssessment(
                lost=False,
                silent=True,
                declare_after=earliest,
                waiting_for=(
                    f"{heard}; the provider said twice that the machine is gone; Portal waits "
                    f"for {rule} (until {clock(earliest)})"
                ),
            )
        return LostAssessment(lost=True, silent=True, waiting_for="", declare_after=earliest)

    def _confirmed_at(self, checks: Sequence[ProviderCheck]) -> float | None:
        """When 'gone' was confirmed: the trailing run of checks that all say gone (a 'present'
        answer starts over) must span the next check about a minute after the first."""
        run: list[ProviderCheck] = []
        for check in checks:
            run = [*run, check] if check.gone else []
        for check in run[1:]:
            if check.at - run[0].at >= self.confirm_gap_s:
                return check.at
        return None
