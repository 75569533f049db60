"""Portal as a library: :class:`Portal` runs, notices, resumes, moves, cancels and reads jobs,
for the ``portal`` command, the console, the MCP server and schedulers that embed Portal.

    from portal.jobs import Portal

    with Portal.open() as portal:
        started = portal.run("train.py", ["--epochs", "3"])
        portal.notice(started.job, seconds=30)
        if portal.wait(started.job).state == "suspended":
            portal.resume(started.job)

Every action answers with a typed value (:mod:`portal.jobs.results`) or raises a
:class:`portal.core.errors.PortalError` with its stable code; none prints. See
docs/embedding.md.
"""

from portal.jobs.listing import Explanation, JobSummary, NoticeAccount, PolicyDecision
from portal.jobs.output import Output, Said
from portal.jobs.results import (
    Cancelled,
    JobRef,
    Moved,
    NoticeSent,
    NotPlacedError,
    Placement,
    Started,
)
from portal.jobs.session import Portal
from portal.jobs.status import (
    AttemptStatus,
    CarryStatus,
    CheckpointRef,
    JobStatus,
)

__all__ = [
    "AttemptStatus",
    "Cancelled",
    "CarryStatus",
    "CheckpointRef",
    "Explanation",
    "JobRef",
    "JobStatus",
    "JobSummary",
    "Moved",
    "NotPlacedError",
    "NoticeAccount",
    "NoticeSent",
    "Output",
    "Placement",
    "PolicyDecision",
    "Portal",
    "Said",
    "Started",
]
