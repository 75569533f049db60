"""A job's output on the terminal: ``portal run`` (attached) and ``portal resume`` follow the
attempt they started, ``portal logs [-f]`` replays every attempt's; stdout to stdout and stderr to
stderr, bytes unchanged, interleaved as they were written, with Portal's own notes (what the
node reports) between them."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from portal.cli.exits import EXIT_PORTAL, EXIT_SUSPENDED, note
from portal.cli.progress import ProgressLine
from portal.control import wording
from portal.control.views import CARRY_WARNINGS
from portal.core.domain import AttemptState, Job, JobState
from portal.jobs.output import Said, Tail

if TYPE_CHECKING:
    from portal.jobs import Portal

__all__ = ["follow", "logs"]


def follow(portal: Portal, job: Job, attempt: int) -> int:
    """Copy the attempt's output to ours until it ends; exit as the script did."""
    paths = portal.plane.paths(job.id)
    tails = {"stdout": Tail(paths.stdout(attempt)), "stderr": Tail(paths.stderr(attempt))}
    seen_events = max((seq for seq, _ in portal.plane.store.events(job.id)), default=0)
    bar = ProgressLine(sys.stderr)
    refused = False  # the runtime refused: a Portal error, not the script's exit code
    while True:
        job = portal.job(job.id)
        current = portal.plane.store.attempts(job.id)[attempt - 1]
        ended = current.state is not AttemptState.RUNNING
        _copy(tails)
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
    _copy(tails)
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
    streams = ("stdout", "stderr") if options.stream == "both" else (options.stream,)
    for item in portal.logs(options.job, streams=streams, follow=options.follow):
        if isinstance(item, Said):
            note(item.text)
        else:
            _write(item.stream, item.data)
    return 0


def _copy(tails: dict[str, Tail]) -> None:
    """What each of the attempt's files gained, to our stream of the same name."""
    for name, tail in tails.items():
        data = tail.read()
        if data:
            _write(name, data)


def _write(stream: str, data: bytes) -> None:
    """Bytes unchanged to our stdout or stderr, after what was printed there as text."""
    target = sys.stdout if stream == "stdout" else sys.stderr
    target.flush()
    target.buffer.write(data)
    target.buffer.flush()


_NOTED = {
    *CARRY_WARNINGS,
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
