"""Periodic checkpoints: the safety net for a machine lost without notice.

Every ``checkpoint_every`` the node asks the runtime for a checkpoint at the next safe point; the
script is held only while its state is captured and written to a local file, then runs on while
the node uploads that file as a complete checkpoint (incremental: chunks the store already holds
are not sent again). One at a time: a checkpoint that falls due while the previous one is still
being taken or uploaded is skipped. A notice always wins: its pause is taken at once, and a
periodic upload still under way is given up.

The interval comes from ``--checkpoint-every`` (remembered by the job for its resumes, as the
event ``checkpoint-every``), else ``PORTAL_CHECKPOINT_EVERY``, else the ``checkpoint_every``
setting, whose default ``auto`` means every 30 minutes on a spot machine and none elsewhere.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from portal.core.errors import InvalidArgumentError
from portal.core.settings import Settings, checkpoint_every
from portal.node.stream import CheckpointStream
from portal.runtime.protocol import Checkpointed

__all__ = [
    "EVERY_ENV",
    "EVERY_EVENT",
    "PeriodicCheckpoints",
    "checkpoint_every_option",
    "note_periodic_resume",
    "remember_interval",
    "remembered_interval",
]

log = logging.getLogger("portal.node")

EVERY_ENV = "PORTAL_CHECKPOINT_EVERY"
#: The event that remembers a job's ``--checkpoint-every`` for its resumes.
EVERY_EVENT = "checkpoint-every"


def remembered_interval(plane: Any, job_id: str) -> str | None:
    """The interval the job was last given (``30s``, ``off``...), or None: the settings decide."""
    found: str | None = None
    with contextlib.suppress(Exception):
        for _, event in plane.store.events(job_id):
            if event.kind == EVERY_EVENT and isinstance(event.data.get("every"), str):
                found = event.data["every"]
    return found


def remember_interval(plane: Any, job_id: str, text: str, origin: str) -> None:
    """Record the job's interval (already validated) so that its resumes keep it."""
    seconds = checkpoint_every(text)
    if seconds is None:
        message = "periodic checkpoints: auto (every 30 min on a spot machine, none elsewhere)"
    elif seconds == 0:
        message = "periodic checkpoints: off"
    else:
        from portal.control import wording

        message = wording.periodic_every(seconds, origin)
    plane.record(job_id, EVERY_EVENT, message, every=text, seconds=seconds, origin=origin)


#: ``--checkpoint-every`` of ``portal run`` and ``portal resume``: (names, options) for argparse.


def checkpoint_every_option(
    given: str | None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Validate a job's periodic-checkpoint interval (``--checkpoint-every``, else
    PORTAL_CHECKPOINT_EVERY in ``environ``, default this process's) and return what the node's
    environment gets for it (``launch_node`` remembers it for the job's resumes)."""
    env = os.environ if environ is None else environ
    origin = "--checkpoint-every"
    text = given
    if text is None:
        text, origin = env.get(EVERY_ENV, "").strip() or None, EVERY_ENV
    if text is None:
        return {}
    try:
        checkpoint_every(text)
    except ValueError as why:
        raise InvalidArgumentError(
            f"{origin} {text!r} is not a checkpoint interval: {why}. E.g. "
            "`portal run --checkpoint-every 10m train.py`",
            details={"option": origin, "value": text},
        ) from None
    return {EVERY_ENV: text.strip()}


def note_periodic_resume(plane: Any, store: Any, job: Any, ref: Any) -> None:
    """When the job's last attempt was lost without notice and ``ref`` is a periodic
    checkpoint, say so: the work done since it was taken is done again."""
    with contextlib.suppress(Exception):
        attempts = plane.store.attempts(job.id)
        if not attempts or str(attempts[-1].state) != "lost":
            return
        summary = store.manifest(job.id, ref.checkpoint_id).summary
        if not summary.get("periodic"):
            return
        from portal.control import wording

        plane.record(
            job.id,
            "resuming-periodic",
            wording.resumes_from_periodic(ref.checkpoint_id, ref.created_at, attempts[-1].number),
            checkpoint=ref.checkpoint_id,
            taken_at=ref.created_at,
        )


class PeriodicCheckpoints:
    """When the node asks for the next periodic checkpoint, and the one under way.

    :param every_s: seconds between checkpoints; None: this node takes none.
    """

    def __init__(self, every_s: float | None, directory: Path) -> None:
        self.every_s = every_s
        self.directory = directory
        self.next_at = math.inf
        self.count = 0
        self.asked: Path | None = None  # the runtime is taking this one
        self.upload: CheckpointStream | None = None
        self.taken: Checkpointed | None = None  # what the runtime said of the one uploading
        self.failed_why: str | None = None  # why the last one failed (said once)

    @classmethod
    def for_job(
        cls, settings: Settings, environ: Mapping[str, str], purchase: str, directory: Path
    ) -> PeriodicCheckpoints:
        """The job's own PORTAL_CHECKPOINT_EVERY (its ``--checkpoint-every``), else the
        settings; ``auto`` depends on the machine's purchase model."""
        own = environ.get(EVERY_ENV, "").strip()
        if own:
            try:
                settings = attrs.evolve(settings, checkpoint_every=checkpoint_every(own))
            except ValueError as why:
                log.warning("ignoring %s=%r: %s", EVERY_ENV, own, why)
        return cls(settings.checkpoint_interval(purchase), directory)

    @property
    def enabled(self) -> bool:
        return self.every_s is not None

    @property
    def busy(self) -> bool:
        """A checkpoint is being taken or uploaded: the next one waits for it."""
        return self.asked is not None or self.upload is not None

    def started(self, now: float) -> None:
        """The job's process started (monotonic ``now``): the first one is due an interval on."""
        if self.every_s is not None:
            self.next_at = now + self.every_s

    def due(self, now: float) -> bool:
        if now < self.next_at:
            return False
        assert self.every_s is not None
        self.next_at = now + self.every_s
        return True

    def next_path(self) -> Path:
        self.count += 1
        return self.directory / f"periodic-{self.count}.portal"

    def discard(self) -> None:
        """Give up the upload under way (a notice's checkpoint goes first; the job ended) and
        remove its local file."""
        upload, self.upload = self.upload, None
        taken, self.taken = self.taken, None
        if upload is not None:
            upload.cancel()
            log.info("periodic checkpoint upload given up (%s)", upload.target.name)
        if taken is not None:
            Path(taken.checkpoint).unlink(missing_ok=True)
        for partial in self.directory.glob(".periodic-*.tmp"):  # a write the runtime left
            partial.unlink(missing_ok=True)
