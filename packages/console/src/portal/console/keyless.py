"""A job read without its key: what the control plane's records say, when its checkpoints cannot
be opened here (its key is on the machine that created it, or in a key store this one cannot
reach).

``JobViews.status`` lists the job's checkpoints from the checkpoint store, which needs the
job's key, and ``JobViews.job`` settles a running job against its latest stored checkpoint,
which needs it too. Everything else the run page shows (state, attempts, events, output, the
checkpoint check, the charts) comes from the records alone, so the console shows those and says
once where the key is, instead of showing only the error.
"""

from __future__ import annotations

from portal.control.views import JobViews
from portal.core.domain import Job
from portal.core.errors import PortalError

__all__ = ["KEY_MISSING", "key_elsewhere", "keyless_job"]

#: The storage's code for "the key store holds no key for this job".
KEY_MISSING = "JOB_KEY_MISSING"


def key_elsewhere(exc: BaseException) -> str | None:
    """The one line to show when ``exc`` says the job's key is not here (None: it says
    something else). The storage's message names the key store it looked in and the way to
    the key."""
    if isinstance(exc, PortalError) and exc.code == KEY_MISSING:
        return " ".join(str(exc).split())  # one line, whatever a key store plugin wrote
    return None


def keyless_job(views: JobViews, ref: str) -> tuple[Job, str | None]:
    """The job by id or name, and the key line when its key is elsewhere. With the key, the
    job is settled as every reader settles it; without, as recorded (settling a running job
    needs its latest stored checkpoint, and a job this machine cannot read is not this
    console's to call lost)."""
    try:
        return views.job(ref), None
    except PortalError as exc:
        line = key_elsewhere(exc)
        if line is None:
            raise
        return views.plane.job(ref), line
