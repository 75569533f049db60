"""What :class:`portal.jobs.Portal`'s actions check before anything changes: the script, the
options that need a cloud's offers, the states a resume starts from, and the node's environment;
each refusal in the ``portal`` command's words, with the way out."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path

from portal.core.domain import Job, JobState
from portal.core.errors import InvalidArgumentError
from portal.jobs.placement import local_only
from portal.jobs.results import JobRef, Placement
from portal.node.periodic import checkpoint_every_option

__all__ = [
    "ENDED",
    "checked_script",
    "named_as",
    "node_environ",
    "not_resumable",
    "optional_path",
    "refuse_offers_for_resume",
    "refuse_offers_for_run",
    "resumable_states",
]


def checked_script(
    script: str | os.PathLike[str],
    args: Iterable[str],
    workdir: str | os.PathLike[str] | None,
    checkpoint_every: str | None,
    environ: Mapping[str, str] | None,
) -> tuple[str, tuple[str, ...], str]:
    """The script (as given), its arguments and the job's directory, checked."""
    where = Path(workdir) if workdir is not None else Path.cwd()
    given = os.fspath(script)
    path = where / given
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.py"))[:3]
        raise InvalidArgumentError(
            f"script {given!r} is a folder, not a Python file: give the file to run"
            + (f" (it holds {', '.join(inside)})" if inside else "")
            + ", e.g. `portal run train.py`",
            details={"script": given},
        )
    if not path.is_file():
        raise InvalidArgumentError(
            f"script {given!r} not found in {where}: give the path of a Python "
            "file, e.g. `portal run train.py`"
        )
    node_environ(checkpoint_every, environ)
    return given, tuple(args), str(where.resolve())


def refuse_offers_for_run(placement: Placement, script: str) -> None:
    """A new job's options that need a cloud's offers, refused where none are installed."""
    for flag, given in (
        (f"--on {placement.on}", placement.on),
        (f"--gpu {placement.gpu}", placement.gpu),
        ("--spot-only", placement.spot_only),
    ):
        if given:
            raise local_only(flag, "", script=script)


def refuse_offers_for_resume(placement: Placement, named: str) -> None:
    """A resume's options that need a cloud's offers, refused where none are installed."""
    memory = placement.memory_gib
    for flag, given in (
        (f"--gpu {placement.gpu}", placement.gpu),
        (f"--on {placement.on}", placement.on),
        (f"--memory {memory:g}" if memory else "", memory),
        ("--spot-only", placement.spot_only),
    ):
        if given:
            raise local_only(flag, named)


#: The ended states a resume takes a job from only when a checkpoint is named.
ENDED = (JobState.FAILED, JobState.CANCELLED)


def node_environ(checkpoint_every: str | None, environ: Mapping[str, str] | None) -> dict[str, str]:
    """What a new attempt's node gets beyond this process's environment: ``environ``, and the
    periodic-checkpoint interval (``checkpoint_every``, else PORTAL_CHECKPOINT_EVERY there or
    here), checked."""
    given = dict(environ or {})
    return {**given, **checkpoint_every_option(checkpoint_every, {**os.environ, **given})}


def named_as(job: JobRef) -> str:
    """How the job was named, for the ways out in messages (``portal resume NAME``)."""
    return job if isinstance(job, str) else job.name or job.id


def optional_path(path: str | os.PathLike[str] | None) -> str | None:
    return None if path is None else os.fspath(path)


def resumable_states(job: Job, *, named_checkpoint: bool = False) -> list[JobState]:
    """The states a resume takes the job from: suspended and lost, and its own ended state
    when a checkpoint is named (the user's choice, said)."""
    states = [JobState.SUSPENDED, JobState.LOST]
    if job.state in ENDED and named_checkpoint:
        states.append(job.state)
    return states


def not_resumable(
    job_id: str, state: JobState, ref: str, *, checkpointed: bool = True, job: Job | None = None
) -> InvalidArgumentError:
    """Why a job in ``state`` does not resume: the same words whether this session saw the state
    itself or lost a race to another resume that changed it first. A failed or cancelled job
    resumes from a checkpoint the user names, if it has one (``checkpointed``); else the way on
    is to run its script again."""
    also = ""
    if state in ENDED and checkpointed:
        also = (
            f"; a {state} job resumes from a checkpoint you name: `portal resume {ref} "
            "--checkpoint ID` (`portal status` lists them)"
        )
    elif state in ENDED and job is not None:
        again = "portal run " + shlex.join([job.script, *job.args])
        also = f"; it has no checkpoint to resume from: run it again with `{again}`"
    return InvalidArgumentError(
        f"job {job_id} is {state}, not suspended: only a suspended job resumes "
        f"(`portal status` shows its state){also}"
    )
