"""A job's output on the terminal: ``portal run`` (attached) and ``portal resume`` follow the
attempt they started, ``portal logs [-f]`` replays every attempt's; stdout to stdout and stderr to
stderr, bytes unchanged, interleaved as they were written, with Portal's own notes (what the
node reports) between them."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from portal.cli.exits import EXIT_PORTAL, EXIT_SUSPENDED, note
from portal.cli.progress import ProgressLine
from portal.control import wording
from portal.control.lineage import output_cuts, superseded_attempts
from portal.control.output_order import ordered_pieces
from portal.control.views import CARRY_WARNINGS
from portal.core.domain import AttemptState, Job, JobState

if TYPE_CHECKING:
    from portal.jobs import Portal

__all__ = ["follow", "logs"]


def follow(portal: Portal, job: Job, attempt: int) -> int:
    """Copy the attempt's output to ours until it ends; exit as the script did."""
    paths = portal.plane.paths(job.id)
    out, err = _Tail(paths.stdout(attempt)), _Tail(paths.stderr(attempt))
    seen_events = max((seq for seq, _ in portal.plane.store.events(job.id)), default=0)
    bar = ProgressLine(sys.stderr)
    refused = False  # the runtime refused: a Portal error, not the script's exit code
    while True:
        job = portal.job(job.id)
        current = portal.plane.store.attempts(job.id)[attempt - 1]
        ended = current.state is not AttemptState.RUNNING
        out.copy(sys.stdout)
        err.copy(sys.stderr)
        for seq, event in portal.plane.store.events(job.id, after=seen_events):
            seen_events = seq
            refused = refused or event.kind == "portal-error"
            if event.kind == "upload-progress":
                bar.update(event.data)
            elif event.kind in _NOTED:
                bar.end()
                note(event.message)
        if ended:
            break
        time.sleep(0.05)
    bar.end()
    out.copy(sys.stdout)
    err.copy(sys.stderr)
    if current.state is AttemptState.SUSPENDED:
        note(f"job {job.id} is suspended; resume it with `{wording.resume_hint(job)}`")
        return EXIT_SUSPENDED
    if current.state is AttemptState.LOST:
        return EXIT_SUSPENDED if job.state is JobState.SUSPENDED else EXIT_PORTAL
    if refused:
        return EXIT_PORTAL
    return current.exit_code if current.exit_code is not None else EXIT_PORTAL


def logs(portal: Portal, options: argparse.Namespace) -> int:
    """``portal logs JOB [-f] [--stream both|stdout|stderr]``: every attempt's output, its
    stdout and stderr interleaved as they were written (the node's index of when each grew),
    stdout to stdout and stderr to stderr; ``-f`` follows the job into its next attempts."""
    job = portal.job(options.job)
    paths = portal.plane.paths(job.id)
    streams = ("stdout", "stderr") if options.stream == "both" else (options.stream,)
    number = 1
    seen_events = 0
    waiting = False  # following a suspended job, told once, until its next attempt starts
    while True:
        attempts = portal.plane.store.attempts(job.id)
        if number > len(attempts):
            if options.follow and job.state is JobState.SUSPENDED and not waiting:
                waiting = True
                note(
                    f"job {job.id} is suspended; resume it with `{wording.resume_hint(job)}`"
                    " (following: its next attempt's output comes here; Ctrl-C stops)"
                )
            if not options.follow or job.state.is_final:
                return 0
            time.sleep(0.2)
            job = portal.job(job.id)
            continue
        waiting = False
        if options.follow and number > 1:  # where each part ran, as it is followed
            attempt = attempts[number - 1]
            origin = (
                f", resumed from checkpoint {attempt.resumed_from}" if attempt.resumed_from else ""
            )
            note(f"attempt {number} on {attempt.machine}{origin}:")
        skipped = superseded_attempts(portal.plane, job).get(number)
        if skipped is not None:  # its work was done again: its output would show twice
            note(skipped)
            number += 1
            continue
        cut = output_cuts(portal.plane, job).get(number)
        out = _Tail(paths.stdout(number), limit=cut.stdout_bytes if cut else None)
        err = _Tail(paths.stderr(number), limit=cut.stderr_bytes if cut else None)
        if "stdout" not in streams:
            out.limit = 0
        if "stderr" not in streams:
            err.limit = 0
        _replay_in_order(out, err, paths.output_index(number))
        while True:
            running = portal.plane.store.attempts(job.id)[number - 1].state is AttemptState.RUNNING
            out.copy(sys.stdout)
            err.copy(sys.stderr)
            if options.follow:
                seen_events = _note_carry(portal, job, seen_events)
            if not (options.follow and running):
                break
            time.sleep(0.1)
            job = portal.job(job.id)
        out.copy(sys.stdout)
        err.copy(sys.stderr)
        if cut is not None:  # the rest was done again by a later attempt
            note(cut.why)
        number += 1


def _note_carry(portal: Portal, job: Job, after: int) -> int:
    """Print the checkpoint check's warnings that appeared since event ``after``."""
    for seq, event in portal.plane.store.events(job.id, after=after):
        after = seq
        if event.kind in _CARRY_NOTED:
            note(event.message)
    return after


_CARRY_NOTED = CARRY_WARNINGS
_NOTED = {
    *_CARRY_NOTED,
    "carry-ok",
    "carry-unblocked",
    "notice",
    "notice-unusable",
    "pausing",
    "deferred",
    "pause-abandoned",
    "uploaded",
    "upload-failed",
    "overrun",
    "node-died",
    "reported-late",
    "portal-error",
    "node-error",
    "silent",
    "machine-check",
    "lost",
    "lost-machine",
}


class _Tail:
    """Copies what a growing file gained since the last call, bytes unchanged."""

    def __init__(self, path: Path, *, limit: int | None = None) -> None:
        self.path = path
        self.offset = 0
        self.limit = limit  # copy no further than this size (the rest is another's work)

    def copy_range(self, stream: TextIO, start: int, end: int | None) -> None:
        """Copy bytes ``start`` to ``end`` (None: to the file's end), and go on from there."""
        try:
            with self.path.open("rb") as f:
                f.seek(start)
                data = f.read(-1 if end is None else end - start)
        except FileNotFoundError:
            return
        self.offset = start + len(data)
        if data:
            stream.flush()
            stream.buffer.write(data)
            stream.buffer.flush()

    def copy(self, stream: TextIO) -> None:
        """What the file gained since the last copy, up to the limit."""
        if self.limit is not None and self.offset >= self.limit:
            return
        self.copy_range(stream, self.offset, self.limit)


def _replay_in_order(out: _Tail, err: _Tail, index: Path) -> None:
    """Copy what both files hold now (up to each one's limit), interleaved as it was written,
    and leave each tail at the end of what it copied."""
    sizes = []
    for tail in (out, err):
        try:
            size = tail.path.stat().st_size
        except FileNotFoundError:
            size = 0
        sizes.append(size if tail.limit is None else min(size, tail.limit))
    pieces = ordered_pieces(index, stdout_size=sizes[0], stderr_size=sizes[1])
    for stream, start, end in pieces:
        tail, target = (out, sys.stdout) if stream == "stdout" else (err, sys.stderr)
        tail.copy_range(target, start, end)
