"""The embedded control plane: one library over SQLite under ``PORTAL_HOME``; no server to start.

It owns the job's records (jobs, attempts, the event log) and the layout of ``PORTAL_HOME``.
The CLI and the node both use it directly; beyond one machine the same calls go to a service.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from portal.control.select import open_control_store
from portal.control.store import new_job_id
from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import Event, Job, JobState
from portal.core.errors import InvalidSettingError
from portal.core.plugins import Plugins
from portal.core.settings import Settings

__all__ = ["ControlPlane", "JobPaths"]

log = logging.getLogger("portal.control")


@attrs.frozen
class JobPaths:
    """Where a job's local files live under ``PORTAL_HOME``."""

    root: Path

    @property
    def notices(self) -> Path:
        """The local notice source's directory (``portal notice JOB`` writes here)."""
        return self.root / "notices"

    def attempt(self, number: int) -> Path:
        return self.root / "attempts" / str(number)

    def stdout(self, number: int) -> Path:
        return self.attempt(number) / "stdout"

    def stderr(self, number: int) -> Path:
        return self.attempt(number) / "stderr"

    def output_index(self, number: int) -> Path:
        """When stdout and stderr grew (``portal.node.output_index``): their order on replay."""
        return self.attempt(number) / "output.idx"

    def node_log(self, number: int) -> Path:
        return self.attempt(number) / "node.log"


class ControlPlane:
    """Jobs, attempts and events of one ``PORTAL_HOME``."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        plugins: Plugins | None = None,
        busy_timeout_s: float = 30.0,
    ) -> None:
        """``busy_timeout_s``: how long a write waits for another writer. The node gives a short
        one, so that a notice never waits long on a stuck control plane (its journal keeps the
        reports instead)."""
        self.settings = settings or Settings.load()
        self.clock = clock
        self.home = self.settings.home
        try:
            self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as why:
            raise InvalidSettingError(
                f"PORTAL_HOME {self.home} cannot be used: {why.strerror or why}. Set PORTAL_HOME "
                "to a directory this user may write (default ~/.portal)",
                details={"setting": "home", "value": str(self.home)},
            ) from None
        _close_to_others(self.home)
        self.store = open_control_store(self.settings, busy_timeout_s=busy_timeout_s)
        self._plugins = plugins

    @property
    def plugins(self) -> Plugins:
        if self._plugins is None:
            self._plugins = Plugins.load()
        return self._plugins

    def paths(self, job_id: str) -> JobPaths:
        return JobPaths(self.home / "jobs" / job_id)

    def create_job(
        self,
        *,
        script: str,
        args: Sequence[str] = (),
        workdir: str | os.PathLike[str],
        name: str | None = None,
        memory_gib: float | None = None,
        state_gib: float | None = None,
        nproc_per_node: int | None = None,
    ) -> Job:
        job = Job(
            id=new_job_id(),
            name=name,
            script=script,
            args=tuple(args),
            workdir=str(Path(workdir).resolve()),
            created_at=self.clock.now(),
            memory_gib=memory_gib,
            state_gib=state_gib,
            nproc_per_node=nproc_per_node,
        )
        self.store.create_job(job)
        self.paths(job.id).notices.mkdir(parents=True, exist_ok=True)
        self.record(job.id, "created", f"job {job.id} created: {script} in {job.workdir}")
        return job

    def job(self, ref: str) -> Job:
        """A job by id or unique name."""
        return self.store.get_job(ref)

    def record(
        self,
        job_id: str,
        kind: str,
        message: str,
        data: Mapping[str, Any] | None = None,
        /,
        **fields: Any,
    ) -> Event:
        """Append an event to the job's log and tell ``portal_event`` observers."""
        return self.append(
            Event(
                job_id=job_id,
                at=self.clock.now(),
                kind=kind,
                message=message,
                data={**(data or {}), **fields},
            )
        )

    def append(self, event: Event) -> Event:
        """Append an event made earlier (a node's backlog keeps each event's own time)."""
        self.store.append_event(event)
        self.plugins.emit(event)
        return event

    def set_state(
        self, job_id: str, state: JobState, *, expect: Sequence[JobState] | None = None
    ) -> Job:
        return self.store.set_job_state(job_id, state, expect=expect)


def _close_to_others(home: Path) -> None:
    """PORTAL_HOME holds the job keys, the control plane's records and, for moments, decrypted
    checkpoints: only its owner may enter it. One made by Portal is 0700 already; one that
    existed before (made by hand, 0755) is closed now, when it is this user's (another user's
    folder is theirs to fix)."""
    with contextlib.suppress(OSError):
        info = home.stat()
        if info.st_uid == os.getuid() and info.st_mode & 0o077:
            home.chmod(0o700)
            log.info(
                "PORTAL_HOME %s was open to others (mode %03o): closed to 700",
                home,
                stat.S_IMODE(info.st_mode),
            )
