"""Starting a node for a job's next attempt: one way, for the CLI and for a node that moves its job.

The node runs in its own session (it outlives whoever started it), its output goes to the
attempt's ``node.log``, and the attempt's output files exist before anyone follows them. A
simulated machine (:mod:`portal.sim`) gives the node its own working directory and environment.

On this machine a job runs in the directory it was started in, or the one its last ``portal
resume --workdir DIR`` named (event ``workdir``): its working-directory files travel with the
checkpoint, so a job whose folder was moved or deleted resumes in another. A node that cannot
start ends its attempt at once, so no attempt is ``running`` without a node to report on it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from portal.control.plane import ControlPlane
from portal.core.domain import AttemptState, Job
from portal.core.errors import InvalidArgumentError, PortalError, UnsafeFolderError
from portal.node.periodic import EVERY_ENV, remember_interval, remembered_interval
from portal.node.runtime_link import control_socket_folder

__all__ = [
    "WORKDIR_EVENT",
    "NodeStartError",
    "WorkdirGoneError",
    "job_workdir",
    "launch_node",
    "resume_workdir",
]

#: The event that moves a job to another working directory on this machine.
WORKDIR_EVENT = "workdir"


class NodeStartError(PortalError):
    """The node of a new attempt could not be started; the attempt is ended, nothing runs."""

    code = "NODE_START_FAILED"


class WorkdirGoneError(InvalidArgumentError):
    """The job's working directory is not there to resume in."""

    code = "WORKDIR_GONE"


def job_workdir(plane: ControlPlane, job: Job) -> Path:
    """Where the job runs on this machine: the directory its last ``portal resume --workdir``
    named, else the one it was started in."""
    for _, event in reversed(plane.store.events(job.id)):
        if event.kind == WORKDIR_EVENT and isinstance(event.data.get("workdir"), str):
            return Path(event.data["workdir"])
    return Path(job.workdir)


def resume_workdir(plane: ControlPlane, job: Job, given: str | None, ref: str) -> Path:
    """The directory a resume on this machine runs the job in, checked before anything changes.

    ``given`` (``--workdir DIR``) is made if missing and becomes the job's from now on; without
    it, the job's own directory must still be there (its files come with the checkpoint, so any
    empty directory will do: the error says so)."""
    current = job_workdir(plane, job)
    if given is None:
        if not current.is_dir():
            raise WorkdirGoneError(
                f"job {job.id}'s working directory {current} is gone (moved or deleted); its "
                "files travel with the checkpoint, so it can resume in another: `portal resume "
                f"{ref} --workdir DIR` (DIR is made if missing), or put the directory back. "
                "The job stays suspended",
                details={"job_id": job.id, "workdir": str(current)},
            )
        return current
    chosen = Path(given).expanduser().resolve()
    try:
        chosen.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidArgumentError(
            f"--workdir {given}: cannot make the directory ({exc.strerror or exc}); name one "
            "this user may write. The job stays suspended",
            details={"job_id": job.id, "workdir": str(chosen)},
        ) from exc
    if chosen != current:
        plane.record(
            job.id,
            WORKDIR_EVENT,
            f"job {job.id} runs in {chosen} from now on (it ran in {current}); its files come "
            "with the checkpoint",
            workdir=str(chosen),
            previous=str(current),
        )
    return chosen


def launch_node(
    plane: ControlPlane,
    job: Job,
    *,
    resume_from: str | None,
    machine: str = "local",
    node_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Record a new attempt on ``machine`` and start its node; returns the attempt's number.

    Raises :class:`NodeStartError` (the attempt ended as failed) when the node cannot start."""
    workdir = None if node_dir is not None else job_workdir(plane, job)
    try:  # the node would refuse it and end; said here, by the command, with the way out
        control_socket_folder()
    except UnsafeFolderError as exc:
        raise NodeStartError(
            f"job {job.id} cannot start on this machine: {exc}", details=dict(exc.details)
        ) from exc
    attempt = plane.store.start_attempt(
        job.id, machine=machine, at=plane.clock.now(), resumed_from=resume_from
    )
    directory = plane.paths(job.id).attempt(attempt.number)
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("stdout", "stderr"):
        (directory / name).touch()
    command = [sys.executable, "-m", "portal.node", job.id, str(attempt.number)]
    if resume_from:
        command += ["--resume", resume_from]
    if node_dir is not None:
        # A machine of its own (the simulated cloud's) has its own disk: the job runs in a fresh
        # directory there, and its working-directory files arrive with the checkpoint, as on a
        # new cloud machine.
        workdir = node_dir / "work"
        workdir.mkdir(parents=True, exist_ok=True)
        command += ["--workdir", str(workdir)]
    elif workdir is not None and workdir != Path(job.workdir):
        command += ["--workdir", str(workdir)]  # moved there by `portal resume --workdir`
    env = dict(os.environ)
    env["PORTAL_HOME"] = str(plane.home)
    env.update(environ or {})
    _periodic_interval(plane, job, env)
    cwd = node_dir or workdir
    with (directory / "node.log").open("ab") as log:
        try:
            node = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
                cwd=cwd,
            )
        except OSError as exc:
            plane.store.end_attempt(
                job.id,
                attempt.number,
                state=AttemptState.FAILED,
                at=plane.clock.now(),
                exit_code=None,
            )
            raise NodeStartError(
                f"the node of job {job.id}'s attempt {attempt.number} could not start in {cwd}: "
                f"{exc.strerror or exc}",
                details={"job_id": job.id, "attempt": attempt.number, "cwd": str(cwd)},
            ) from exc
    # The node outlives this call (and a command's process), but while this process lives it is
    # its child: reaped when it ends, so that a scheduler embedding Portal gathers no zombies.
    threading.Thread(target=node.wait, name=f"reap node {job.id}", daemon=True).start()
    return attempt.number


def _periodic_interval(plane: ControlPlane, job: Job, env: dict[str, str]) -> None:
    """The job's periodic-checkpoint interval for its node: one given now (``--checkpoint-every``
    puts it in PORTAL_CHECKPOINT_EVERY) is remembered for the job's later attempts; without one,
    the remembered one holds."""
    given = env.get(EVERY_ENV, "").strip()
    remembered = remembered_interval(plane, job.id)
    if given and given != remembered:
        # A bad value: the node says it ignores it (the CLI refuses one before this).
        with contextlib.suppress(ValueError):
            remember_interval(plane, job.id, given, "set for this job")
    elif remembered:
        env[EVERY_ENV] = remembered
