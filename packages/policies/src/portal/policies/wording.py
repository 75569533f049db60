"""Every sentence the policies show a user, in one place.

Events, warnings, decision reasons and plan lines are built here and nowhere else, so the wording
the spec fixes (``spot aws c7i.large (us-east-1) skipped: this job's state (12.0 GB, its
checkpoint as stored) exceeds what its 120 s notice can save (about 7.9 GB)``) stays exact and
the same everywhere. Sizes are decimal (1 GB = 10^9 bytes), as providers quote network and disk
rates; every sentence about the state names the figure it used.
"""

from __future__ import annotations

from portal.core.domain import Offer
from portal.core.specs import StateMeasure
from portal.core.units import clock, size
from portal.policies.bound import Bound
from portal.policies.measure import RESIDENT_MARGIN, Figure
from portal.policies.sizing import SizeSource


def notice(seconds: float) -> str:
    """``120 s``, ``25.5 s``."""
    return f"{seconds:g} s"


def price(per_hour: float) -> str:
    return f"${per_hour:.4f}/h"


def state(measure: StateMeasure) -> str:
    """``this job's state (12.0 GB, its checkpoint as stored)``."""
    return f"this job's state ({size(measure.bytes)}, {measure.figure})"


def exceeds(measure: StateMeasure, bound: Bound) -> str:
    """The clause every bound sentence shares."""
    return (
        f"{state(measure)} exceeds what its {notice(bound.notice_s)} notice can save "
        f"(about {size(bound.bytes)})"
    )


def _exceeds_of(measure: StateMeasure, bound: Bound, where: Offer) -> str:
    return (
        f"{state(measure)} exceeds what the {notice(bound.notice_s)} notice of {where.describe()} "
        f"can save (about {size(bound.bytes)})"
    )


def _resident_tail(measure: StateMeasure, bound: Bound) -> str:
    if measure.figure != Figure.RESIDENT_AND_GPU:
        return ""
    return (
        "; memory overstates a checkpoint, so Portal acts on it alone only a quarter over "
        f"(about {size(bound.bytes * RESIDENT_MARGIN)})"
    )


# --- the state bound -------------------------------------------------------------------------


def over_bound(measure: StateMeasure, bound: Bound) -> str:
    """Why a spot offer is left out for the state bound (a clause: see :func:`skipped`)."""
    return f"{exceeds(measure, bound)}{_resident_tail(measure, bound)}"


def skipped(offer: Offer, clause: str) -> str:
    """An event: ``spot aws c7i.large (us-east-1) skipped: this job's state (...) exceeds ...``."""
    return f"{offer.describe()} skipped: {clause}"


def would_not_use(offer: Offer, clause: str) -> str:
    """The plan's line for the same skip: ``would not use spot aws c7i.large (us-east-1): ...``."""
    return f"would not use {offer.describe()}: {clause}"


def pinned_over(offer: Offer, spec: str, measure: StateMeasure, bound: Bound) -> str:
    return (
        f"{offer.describe()} kept because --on {spec} names it: {exceeds(measure, bound)}; if it "
        "is reclaimed, the work since its last checkpoint may be lost"
    )


def asked_over(offer: Offer, measure: StateMeasure, bound: Bound) -> str:
    return (
        f"{offer.describe()} used with a warning: {exceeds(measure, bound)}; a new job's "
        "--state-gib is a guess, so its measured state will decide once Portal has one"
    )


def resident_near(offer: Offer, measure: StateMeasure, bound: Bound) -> str:
    return (
        f"{offer.describe()} kept with a warning: {exceeds(measure, bound)}"
        f"{_resident_tail(measure, bound)}"
    )


def bound_note(bound: Bound) -> str:
    """The sentence under each spot offer: what its notice can save, and how that was reached."""
    rate = bound.rate
    how = "measured" if rate.measured else "estimate"
    sizing = bound.sizing
    if sizing.source is SizeSource.DEFAULT:
        sized = (
            f"{sizing.machine_class} class: its size could not be looked up, so it is sized as "
            "its default class"
        )
    else:
        source = "the catalog" if sizing.source is SizeSource.CATALOG else "the provider's listing"
        sized = f"{sizing.machine_class} class, {sizing.vcpus} vCPUs from {source}"
    return (
        f"its {notice(bound.notice_s)} notice can save about {size(bound.bytes)} "
        f"({rate.mb_per_s:g} MB/s ({how}) to {bound.route.words}, {rate.t0_s:g} s to start, "
        f"halved; {sized})"
    )


def usable(offer: Offer, bound: Bound | None, extra: str = "") -> str:
    """The reason of a ``use`` decision: the offer, its price and, for spot, its note."""
    text = f"{offer.describe()} at {price(offer.price_per_hour)}"
    if bound is not None:
        text += f": {bound_note(bound)}"
    return text + extra


# --- move when over ----------------------------------------------------------------------------


def provision(target: Offer, current: Offer, measure: StateMeasure, bound: Bound) -> str:
    return (
        f"provision {target.describe()} ahead: {_exceeds_of(measure, bound, current)}; the job "
        "moves there once it is ready"
    )


def move(target: Offer, current: Offer, measure: StateMeasure, bound: Bound) -> str:
    return f"move to {target.describe()} once it is ready: {_exceeds_of(measure, bound, current)}"


def kept_move_off(current: Offer, measure: StateMeasure, bound: Bound) -> str:
    return (
        f"{current.describe()} kept: {exceeds(measure, bound)}, and spot.move_when_over is "
        "false; if it is reclaimed, the work since its last checkpoint may be lost"
    )


def kept_pinned(current: Offer, spec: str, measure: StateMeasure, bound: Bound) -> str:
    return (
        f"{current.describe()} kept because --on {spec} pins the job to it: "
        f"{exceeds(measure, bound)}; if it is reclaimed, the work since its last checkpoint may "
        "be lost"
    )


def kept_spot_only(current: Offer, measure: StateMeasure, bound: Bound) -> str:
    return (
        f"{current.describe()} kept because the job runs on spot only: "
        f"{exceeds(measure, bound)}; if it is reclaimed, the work since its last checkpoint may "
        "be lost (move it with `portal move JOB --no-spot` to keep it safe)"
    )


def kept_no_fit(current: Offer, measure: StateMeasure, bound: Bound) -> str:
    return (
        f"{current.describe()} kept for now: {exceeds(measure, bound)}, and no on-demand offer "
        "fits the job; Portal looks again at the next check"
    )


# --- other reasons -----------------------------------------------------------------------------


def excluded(until: float | None) -> str:
    when = f" until {clock(until)}" if until is not None else " for 30 minutes"
    return f"its pool reclaimed a machine, so it is left out of new placements{when}"


def excluded_pinned(offer: Offer, spec: str) -> str:
    return (
        f"{offer.describe()} kept because --on {spec} names it, though its pool reclaimed a "
        "machine less than 30 minutes ago"
    )


def gpu_missing(offer: Offer, gpu: str) -> str:
    have = offer.machine_type.gpu_model
    what = f"its GPU is {have}" if have else "it has no GPU"
    return f"--gpu {gpu} asks for {gpu} and {what}"


def memory_short(offer: Offer, asked_gib: float) -> str:
    return (
        f"its {offer.machine_type.memory_gib:g} GiB of memory is less than the "
        f"{asked_gib:g} GiB the job asks for (--memory)"
    )


def no_spot() -> str:
    return "--no-spot leaves out spot"


def spot_only() -> str:
    return "this job runs on spot only"


def not_named(spec: str) -> str:
    return f"--on {spec} names another machine"


def runs_there() -> str:
    return "the job runs there now"


def not_cheaper(offer: Offer, current: Offer) -> str:
    return (
        f"{price(offer.price_per_hour)} is not less than the {price(current.price_per_hour)} of "
        f"{current.describe()}, where the job runs"
    )


def cheaper(offer: Offer, current: Offer, bound: Bound | None) -> str:
    extra = f"; {bound_note(bound)}" if bound is not None else ""
    return (
        f"{offer.describe()} is cheaper: {price(offer.price_per_hour)} instead of "
        f"{price(current.price_per_hour)} on {current.describe()}{extra}"
    )


def not_spot_for_return() -> str:
    return "the return policy brings a job back to spot"


def already_on_spot(current: Offer) -> str:
    return f"the job already runs on spot ({current.describe()}), so there is nothing to return"


def back_to_spot(offer: Offer, current: Offer | None, bound: Bound | None) -> str:
    where = f" from {current.describe()}" if current is not None else ""
    note = f": {bound_note(bound)}" if bound is not None else ""
    return (
        f"{offer.describe()} can take the job back to spot{where} at "
        f"{price(offer.price_per_hour)}{note}"
    )


def stays(job_id: str, action: str, measure: StateMeasure | None, *, spot_only_job: bool) -> str:
    """Why no machine was chosen, and the way out (the event of a job left suspended)."""
    where = "stays suspended" if action != "move" else "stays where it is"
    verb = "resume" if action != "move" else "move"
    if spot_only_job and measure is not None:
        return (
            f"job {job_id} {where}: no spot offer can save {state(measure)}; {verb} it on an "
            f"exact machine (portal {verb} {job_id} --on SPEC) or on-demand "
            f"(portal {verb} {job_id} --no-spot)"
        )
    return (
        f"job {job_id} {where}: no offer is left after the filters above; {verb} it with other "
        f"flags (another --gpu, or --on SPEC for an exact machine), or try again when the pools "
        "left out after a reclaim are back"
    )


def growth_note(measure: StateMeasure) -> str:
    """D2's explanation of the figure: what it is and what was added."""
    figure = Figure(measure.figure)
    if figure.is_checkpoint:
        return f"{size(measure.bytes)}, {measure.figure} (with a tenth added for growth since)"
    if figure is Figure.RESIDENT_AND_GPU:
        return (
            f"{size(measure.bytes)}, {measure.figure} (memory overstates a checkpoint: Portal "
            f"leaves out a spot offer on it alone only {RESIDENT_MARGIN - 1:.0%} over its bound)"
        )
    return (
        f"{size(measure.bytes)}, {measure.figure} (a guess: spot offers below it are used with a "
        "warning)"
    )


def _cheaper_because(target: Offer, current: Offer, bound: Bound | None) -> str:
    notice = f", and {bound_note(bound)}" if bound is not None else ""
    return (
        f"it costs {price(target.price_per_hour)} instead of the "
        f"{price(current.price_per_hour)} of {current.describe()} and holds the job{notice}"
    )


def cheaper_provision(target: Offer, current: Offer, bound: Bound | None) -> str:
    return (
        f"provision {target.describe()} ahead: {_cheaper_because(target, current, bound)}; the "
        "job moves there once it is ready (cheaper.move: false turns this off)"
    )


def cheaper_move(target: Offer, current: Offer, bound: Bound | None) -> str:
    return (
        f"move to {target.describe()} once it is ready: {_cheaper_because(target, current, bound)}"
    )


def return_provision(target: Offer, current: Offer, bound: Bound | None) -> str:
    return (
        f"provision {target.describe()} ahead: {back_to_spot(target, current, bound)}; the job "
        "moves there once it is ready (return.move: false turns this off)"
    )


def return_move(target: Offer, current: Offer, bound: Bound | None) -> str:
    return f"move to {target.describe()} once it is ready: {back_to_spot(target, current, bound)}"
