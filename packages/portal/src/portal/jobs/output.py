"""A job's output, as :meth:`portal.jobs.Portal.logs` gives it: every attempt's stdout and
stderr, bytes unchanged, interleaved as they were written (the node's index of when each grew),
with what a person following it is told in between (where each attempt ran, output another
attempt did again, a suspended job's way on, the checkpoint check's warnings).

An attempt whose work a later one did again (it ran on past the checkpoint the job resumed
from) is left out, or cut where that checkpoint was taken, so that the output reads as one run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from portal.control import wording
from portal.control.lineage import output_cuts, superseded_attempts
from portal.control.output_order import ordered_pieces
from portal.control.views import CARRY_WARNINGS
from portal.core.domain import AttemptState, Job, JobState

if TYPE_CHECKING:
    from portal.jobs.session import Portal

__all__ = ["STREAMS", "Output", "Said", "Tail", "job_output"]

#: An attempt's output streams, in the order they are named.
STREAMS = ("stdout", "stderr")


@attrs.frozen
class Output:
    """Bytes attempt ``attempt`` wrote to ``stream`` (``stdout`` or ``stderr``)."""

    attempt: int
    stream: str
    data: bytes


@attrs.frozen
class Said:
    """What a person following the output is told at this point (``portal logs`` prints it
    after ``portal:`` on stderr)."""

    text: str


class Tail:
    """What a growing file gained since the last read, bytes unchanged, up to ``limit``."""

    def __init__(self, path: Path, *, limit: int | None = None) -> None:
        self.path = path
        self.offset = 0
        self.limit = limit  # read no further than this size (the rest is another's work)

    def read_range(self, start: int, end: int | None) -> bytes:
        """Bytes ``start`` to ``end`` (None: to the file's end); the next read goes on there."""
        try:
            with self.path.open("rb") as f:
                f.seek(start)
                data = f.read(-1 if end is None else end - start)
        except FileNotFoundError:
            return b""
        self.offset = start + len(data)
        return data

    def read(self) -> bytes:
        """What the file gained since the last read, up to the limit."""
        if self.limit is not None and self.offset >= self.limit:
            return b""
        return self.read_range(self.offset, self.limit)

    def size(self) -> int:
        """How much there is to read now, in all (up to the limit)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        return size if self.limit is None else min(size, self.limit)


def job_output(
    portal: Portal,
    job: Job,
    *,
    streams: tuple[str, ...] = STREAMS,
    follow: bool = False,
    poll_s: float = 0.1,
) -> Iterator[Output | Said]:
    """Every attempt's output of ``job`` (see the module); ``follow``: go on while it runs,
    into its next attempts, until it ends for good."""
    paths = portal.plane.paths(job.id)
    number = 1
    seen_events = 0
    waiting = False  # following a suspended job, told once, until its next attempt starts
    while True:
        attempts = portal.plane.store.attempts(job.id)
        if number > len(attempts):
            if follow and job.state is JobState.SUSPENDED and not waiting:
                waiting = True
                yield Said(
                    f"job {job.id} is suspended; resume it with `{wording.resume_hint(job)}`"
                    " (following: its next attempt's output comes here; Ctrl-C stops)"
                )
            if not follow or job.state.is_final:
                return
            time.sleep(2 * poll_s)
            job = portal.job(job.id)
            continue
        waiting = False
        if follow and number > 1:  # where each part ran, as it is followed
            attempt = attempts[number - 1]
            origin = (
                f", resumed from checkpoint {attempt.resumed_from}" if attempt.resumed_from else ""
            )
            yield Said(f"attempt {number} on {attempt.machine}{origin}:")
        skipped = superseded_attempts(portal.plane, job).get(number)
        if skipped is not None:  # its work was done again: its output would show twice
            yield Said(skipped)
            number += 1
            continue
        cut = output_cuts(portal.plane, job).get(number)
        tails = {
            "stdout": Tail(paths.stdout(number), limit=cut.stdout_bytes if cut else None),
            "stderr": Tail(paths.stderr(number), limit=cut.stderr_bytes if cut else None),
        }
        for name, tail in tails.items():
            if name not in streams:
                tail.limit = 0
        yield from _in_order(number, tails, paths.output_index(number))
        while True:
            running = portal.plane.store.attempts(job.id)[number - 1].state is AttemptState.RUNNING
            yield from _gained(number, tails)
            if follow:
                for seq, event in portal.plane.store.events(job.id, after=seen_events):
                    seen_events = seq
                    if event.kind in CARRY_WARNINGS:
                        yield Said(event.message)
            if not (follow and running):
                break
            time.sleep(poll_s)
            job = portal.job(job.id)
        yield from _gained(number, tails)
        if cut is not None:  # the rest was done again by a later attempt
            yield Said(cut.why)
        number += 1


def _gained(attempt: int, tails: dict[str, Tail]) -> Iterator[Output]:
    for name in STREAMS:
        data = tails[name].read()
        if data:
            yield Output(attempt, name, data)


def _in_order(attempt: int, tails: dict[str, Tail], index: Path) -> Iterator[Output]:
    """What both files hold now (up to each one's limit), interleaved as it was written; each
    tail is left at the end of what it gave."""
    sizes = {name: tails[name].size() for name in STREAMS}
    for name, start, end in ordered_pieces(
        index, stdout_size=sizes["stdout"], stderr_size=sizes["stderr"]
    ):
        data = tails[name].read_range(start, end)
        if data:
            yield Output(attempt, name, data)
