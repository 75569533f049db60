"""The resume/move planner: which machine ``portal resume`` or ``portal move`` would use, and why.

A plan is the ordered decisions, the chosen offer (or none, with the way out) and numbered lines
a user reads (``portal resume JOB --plan``, ``portal move JOB --plan``)::

    D1 request: resume job-1 --gpu L4
    D2 state: 13.2 GB, its checkpoint as stored (with a tenth added for growth since)
    D3 offers considered: 40 (24 spot, 16 on-demand)
    D4 filters: 34 left out (--gpu L4: 34)
    D5 pools left out after a reclaim: 1
       would not use spot aws g6.xlarge (us-east-1): its pool reclaimed a machine, so ...
    D6 spot offers left out for the state bound: 1
       would not use spot gcp g2-standard-4 (us-central1): this job's state (13.2 GB, its
       checkpoint as stored) exceeds what its 30 s notice can save (about 2.3 GB)
    D7 candidates, cheapest first: 4
       spot aws g6.2xlarge (us-east-1) at $0.4900/h: its 120 s notice can save about 42.0 GB (...)
    D8 choice: spot aws g6.2xlarge (us-east-1) at $0.4900/h; notice 120 s, can save about 42.0 GB

D1 the request, D2 the state's measure (always named), D3 what was offered, D4 what the flags
left out (counts; every skip is in the decisions), D5 reclaimed pools, D6 spot offers whose notice
cannot save the state (each as ``would not use ...``, warnings as ``warning: ...``), D7 what is
left, cheapest first, each spot offer with the sentence of what its notice can save, D8 the choice
and its notice field. Lines under a D line are indented by three spaces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import attrs

from portal.core import units
from portal.core.domain import Decision, Event, Job, Offer, Verdict
from portal.core.errors import InvalidArgumentError
from portal.core.specs import PlacementContext, StateMeasure
from portal.policies import wording
from portal.policies.base import cheapest_first
from portal.policies.bound import Bound, Bounds
from portal.policies.exclusions import PoolExclusions
from portal.policies.measure import measure_job
from portal.policies.options import PlacementOptions
from portal.policies.request import Action, PlacementRequest, gpu_matches, known_gpu_models
from portal.policies.screen import Rule, Screen, Screened

__all__ = ["PLAN_POLICY", "Plan", "Planner"]

#: The ``policy`` of the planner's own decisions.
PLAN_POLICY = "plan"
#: Candidates listed under D7 (the rest are in the decisions).
_SHOWN = 10
_INDENT = "   "
#: Skips that are worth an event in the job's log (a flag's filter is the user's own doing).
_EVENT_RULES = {Rule.STATE_BOUND, Rule.EXCLUDED_POOL}


@attrs.frozen(kw_only=True)
class Plan:
    """What a resume or move would do. ``chosen`` is None when the job stays (see ``lines``)."""

    job_id: str
    action: Action
    request: PlacementRequest
    measure: StateMeasure | None
    decisions: tuple[Decision, ...]
    chosen: Offer | None
    bound: Bound | None
    lines: tuple[str, ...]
    outcome: str

    @property
    def notice_s(self) -> float | None:
        """The chosen machine's notice (None for a machine that is not reclaimed, or none)."""
        return self.chosen.notice_s if self.chosen is not None else None

    @property
    def warnings(self) -> list[str]:
        """The warnings about the offer chosen (the plan's D6 lines list every kept offer's)."""
        return [d.reason for d in self._chosen_warnings()]

    def _chosen_warnings(self) -> list[Decision]:
        return [
            d
            for d in self.decisions
            if d.verdict is Verdict.WARN and self.chosen is not None and d.offer == self.chosen
        ]

    def render(self) -> str:
        return "\n".join(self.lines)

    def events(self, at: float) -> list[Event]:
        """The events this plan adds to the job's log when it is carried out (or refused)."""
        events = []
        for decision in self.decisions:
            rule = decision.figures.get("rule")
            if decision.verdict is Verdict.SKIP and rule in _EVENT_RULES:
                kind = "placement.skipped"
            elif decision.verdict is Verdict.WARN and decision in self._chosen_warnings():
                kind = "placement.warning"
            else:
                continue
            events.append(
                Event(
                    job_id=self.job_id,
                    at=at,
                    kind=kind,
                    message=decision.reason,
                    data=dict(decision.figures),
                )
            )
        if self.chosen is None:
            events.append(
                Event(job_id=self.job_id, at=at, kind="placement.none", message=self.outcome)
            )
        return events


class Planner:
    """Plans resumes and moves with the shared rules, the request's flags, cheapest first."""

    def __init__(self, bounds: Bounds, exclusions: PoolExclusions | None = None) -> None:
        self.bounds = bounds
        self.exclusions = exclusions

    def plan(
        self,
        job: Job,
        offers: Sequence[Offer],
        context: PlacementContext,
        request: PlacementRequest | None = None,
    ) -> Plan:
        request = request or PlacementRequest()
        if self.exclusions is not None:
            context = self.exclusions.apply(context)
        self._check(request, offers)
        options = PlacementOptions.read(context.settings)
        if request.on is not None:
            options = attrs.evolve(options, on=request.on)
        measure = measure_job(job, context.state)
        screen = Screen(self.bounds, context, options, measure)
        lines = [self._d1(job, request), f"D2 state: {self._d2(measure)}", self._d3(offers)]

        memory_gib = request.memory_gib if request.memory_gib is not None else job.memory_gib
        filtered, dropped, counts = self._filters(offers, request, screen, memory_gib)
        lines.append(self._d4(counts, len(offers)))

        results = [screen.one(s.offer) for s in filtered]
        excluded = [r for r in results if r.rule == Rule.EXCLUDED_POOL]
        over = [r for r in results if r.rule == Rule.STATE_BOUND]
        kept = cheapest_first(r for r in results if r.kept)
        lines.append(f"D5 pools left out after a reclaim: {len(excluded) or 'none'}")
        lines += [_INDENT + wording.would_not_use(r.offer, r.clause or "") for r in excluded]
        lines.append(f"D6 spot offers left out for the state bound: {len(over) or 'none'}")
        lines += [_INDENT + wording.would_not_use(r.offer, r.clause or "") for r in over]
        lines += [_INDENT + f"warning: {w}" for r in kept for w in r.warnings]
        lines.append(f"D7 candidates, cheapest first: {len(kept) or 'none'}")
        lines += [_INDENT + wording.usable(r.offer, r.bound) for r in kept[:_SHOWN]]
        if len(kept) > _SHOWN:
            lines.append(_INDENT + f"... and {len(kept) - _SHOWN} more")

        chosen = kept[0] if kept else None
        spot_only_stuck = request.spot_only and bool(over)
        outcome = (
            self._chosen_line(chosen)
            if chosen is not None
            else wording.stays(job.id, request.action, measure, spot_only_job=spot_only_stuck)
        )
        lines.append(f"D8 choice: {outcome}" if chosen else f"D8 choice: none: {outcome}")

        decisions: list[Decision] = []
        for rank, r in enumerate(kept):
            decisions.append(
                Decision(
                    policy=PLAN_POLICY,
                    verdict=Verdict.USE,
                    reason=wording.usable(r.offer, r.bound),
                    offer=r.offer,
                    figures={**r.figures, "rank": rank + 1},
                )
            )
            decisions.extend(r.warns(PLAN_POLICY))
        decisions += [r.skip(PLAN_POLICY) for r in results if not r.kept]
        decisions += [d.skip(PLAN_POLICY) for d in dropped]
        return Plan(
            job_id=job.id,
            action=request.action,
            request=request,
            measure=measure,
            decisions=tuple(decisions),
            chosen=chosen.offer if chosen else None,
            bound=chosen.bound if chosen else None,
            lines=tuple(lines),
            outcome=outcome,
        )

    # --- checks and filters -------------------------------------------------------------------

    def _check(self, request: PlacementRequest, offers: Sequence[Offer]) -> None:
        """Refuse a flag that names nothing, before any plan is made."""
        if request.gpu is not None:
            known = known_gpu_models(self.bounds.sizer.machine_types, offers)
            if not any(gpu_matches(request.gpu, model) for model in known):
                raise InvalidArgumentError(
                    f"--gpu {request.gpu!r} is not a GPU model Portal's catalogs or offers know; "
                    f"known models: {', '.join(known) or 'none'}. Check the spelling, or leave "
                    "--gpu out",
                    details={"gpu": request.gpu, "known": known},
                )
        if request.on is not None:
            request.on.select(offers)  # raises, naming the spec, when it matches nothing

    def _filters(
        self,
        offers: Sequence[Offer],
        request: PlacementRequest,
        screen: Screen,
        memory_gib: float | None = None,
    ) -> tuple[list[Screened], list[Screened], Counter[str]]:
        """The offers the request's flags keep, and those they leave out (counted by flag). A
        machine with less memory than the job asks for never runs it (a type whose memory the
        catalog does not know, 0, is kept)."""
        kept: list[Screened] = []
        dropped: list[Screened] = []
        counts: Counter[str] = Counter()
        for offer in offers:
            clause, rule, flag = self._flag_clause(offer, request, memory_gib)
            bound = screen.bound_of(offer) if clause is not None else None
            screened = Screened(offer=offer, bound=bound, figures=screen.figures(offer, bound))
            if clause is None:
                kept.append(screened)
            else:
                counts[flag] += 1
                dropped.append(screen.drop(screened, clause, rule))
        return kept, dropped, counts

    @staticmethod
    def _flag_clause(
        offer: Offer, request: PlacementRequest, memory_gib: float | None = None
    ) -> tuple[str | None, str, str]:
        if request.on is not None and not request.on.matches(offer):
            return wording.not_named(request.on.text), Rule.ON, f"--on {request.on.text}"
        if request.gpu is not None and not gpu_matches(request.gpu, offer.machine_type.gpu_model):
            return wording.gpu_missing(offer, request.gpu), Rule.GPU, f"--gpu {request.gpu}"
        if request.no_spot and offer.capacity.interruptible:
            return wording.no_spot(), Rule.NO_SPOT, "--no-spot"
        if request.spot_only and not offer.capacity.interruptible:
            return wording.spot_only(), Rule.SPOT_ONLY, "spot only"
        if memory_gib and 0 < offer.machine_type.memory_gib < memory_gib:
            return (
                wording.memory_short(offer, memory_gib),
                Rule.MEMORY,
                f"--memory {memory_gib:g}",
            )
        return None, "", ""

    # --- lines --------------------------------------------------------------------------------

    @staticmethod
    def _d1(job: Job, request: PlacementRequest) -> str:
        flags = request.flags()
        return f"D1 request: {request.action} {job.id}" + (f" {flags}" if flags else "")

    @staticmethod
    def _d2(measure: StateMeasure | None) -> str:
        if measure is None:
            return (
                "not measured, and no --state-gib guess: spot offers are not checked "
                "against what their notice can save"
            )
        return wording.growth_note(measure)

    @staticmethod
    def _d3(offers: Sequence[Offer]) -> str:
        spot = sum(1 for o in offers if o.capacity.interruptible)
        return f"D3 offers considered: {len(offers)} ({spot} spot, {len(offers) - spot} not spot)"

    @staticmethod
    def _d4(counts: Counter[str], total: int) -> str:
        if not counts:
            return "D4 filters: none"
        detail = ", ".join(f"{flag}: {n}" for flag, n in sorted(counts.items()))
        return f"D4 filters: {sum(counts.values())} of {total} left out ({detail})"

    @staticmethod
    def _chosen_line(chosen: Screened) -> str:
        offer, bound = chosen.offer, chosen.bound
        head = f"{offer.describe()} at {wording.price(offer.price_per_hour)}"
        if bound is None:
            return f"{head}; not reclaimed, no notice"
        return (
            f"{head}; notice {wording.notice(bound.notice_s)}, can save about "
            f"{units.size(bound.bytes)}"
        )
