"""What :class:`portal.jobs.Portal`'s actions ask for and answer: frozen, typed values.

An action never prints. What a person should be told along the way (a checkpoint kept on this
machine stored first, a warning about the offer chosen) comes back in ``said``, in order, in
the words the ``portal`` command prints after ``portal:``; the command prints them, a scheduler
logs them or shows them to its own users.
"""

from __future__ import annotations

import attrs

from portal.core.domain import Job
from portal.core.errors import InvalidArgumentError, PortalError

__all__ = [
    "Cancelled",
    "JobRef",
    "Moved",
    "NotPlacedError",
    "NoticeSent",
    "Placement",
    "Started",
]


#: A job, or how a person names one (its id ``j-...`` or its unique name).
JobRef = Job | str


@attrs.frozen
class Placement:
    """Where a job asks to run: what ``--on``, ``--gpu``, ``--no-spot``, ``--spot-only``,
    ``--memory`` and ``--state-gib`` say on the command line.

    ``on``: an offer (``spot:aws:c7i.large``, ``on-demand``, ``local``...); ``gpu``: a GPU model
    the machine must have; ``memory_gib``: the memory the machine must have; ``state_gib``: the
    state a new job expects to hold (its notice must save that much). Without a cloud's offers
    installed only the empty placement is possible (the job runs on this machine)."""

    on: str | None = None
    gpu: str | None = None
    no_spot: bool = False
    spot_only: bool = False
    memory_gib: float | None = None
    state_gib: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.no_spot and self.spot_only:
            raise InvalidArgumentError(
                "--no-spot and --spot-only ask for opposite machines: give one of them"
            )

    @property
    def asks(self) -> bool:
        """Whether it asks for anything beyond "wherever Portal runs it"."""
        return bool(
            self.on or self.gpu or self.no_spot or self.spot_only or self.memory_gib
        ) or bool(self.state_gib)


@attrs.frozen
class Started:
    """A job's new attempt is running: a new job's first, or a resumed job's next.

    ``machine``: where (``local``, or the cloud machine's name); ``checkpoint``: the checkpoint
    it continues from (None for a new job's first attempt)."""

    job: Job
    attempt: int
    machine: str = "local"
    checkpoint: str | None = None
    said: tuple[str, ...] = ()


@attrs.frozen
class Moved:
    """A running job paused on ``source`` and resumed on ``target`` from ``checkpoint``."""

    job: Job
    attempt: int
    source: str
    target: str
    checkpoint: str
    said: tuple[str, ...] = ()


@attrs.frozen
class NoticeSent:
    """A notice went to the job's machine: it pauses at a safe point within ``seconds``."""

    job: Job
    notice_id: str
    seconds: float


@attrs.frozen
class Cancelled:
    """The job ended for good (``already``: it had ended before, as ``job.state`` says);
    ``kept``: whether it has checkpoints, kept for a resume the user names."""

    job: Job
    already: bool
    kept: bool

    @property
    def message(self) -> str:
        if self.already:
            return f"job {self.job.id} is already {self.job.state}"
        said = "its checkpoints are kept" if self.kept else "it had no checkpoint"
        return f"job {self.job.id} cancelled ({said})"


class NotPlacedError(PortalError):
    """No offer can take the job now: it is not started (a run), stays suspended (a resume) or
    stays where it is (a move). ``outcome`` says why, in the plan's words; ``said``, what was
    to be told before it (warnings)."""

    code = "NOT_PLACED"

    def __init__(self, outcome: str, *, said: tuple[str, ...] = (), job: str | None = None):
        super().__init__(outcome, details={"job": job} if job else {})
        self.outcome = outcome
        self.said = said
