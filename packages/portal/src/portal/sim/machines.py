"""The simulated cloud's machines: local node processes that stand in for provisioned VMs.

With ``cloud: simulated`` (``PORTAL_CLOUD=simulated``) ``portal resume`` and ``portal move`` place
jobs on the offers of :class:`~portal.policies.SimulatedCloud`. Provisioning one gives a machine:
a directory ``PORTAL_HOME/sim/machines/<id>/`` (the working directory of its node process) with
``machine.json`` saying which offer it is (provider, region, type, spot or on-demand, notice
length, price) and which job attempt it runs. The cloud can then do to it what a real one does:

* **reclaim** it: a notice of its offer's length is delivered through the local notice source to
  the node running there, and the reclaim is recorded in the control plane, so its pool is left
  out of new placements for 30 minutes;
* make it **go silent**: its node and job are stopped (``SIGSTOP``), so nothing is reported or
  heard from it any more, exactly like a machine whose network is gone;
* **release** it: its node (and the job with it) is killed and the machine is marked released.

Everything is local and deterministic: machine ids count up per ``PORTAL_HOME``, and the offers
come from the same data every time (the bundled ``simulated.json``, or the file named by
``simulated_cloud_data`` / ``PORTAL_SIMULATED_CLOUD_DATA``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import attrs

from portal.control.liveness import node_alive
from portal.control.plane import ControlPlane
from portal.core.domain import Notice, Offer
from portal.core.errors import InvalidArgumentError, InvalidSettingError
from portal.policies import SimulatedCloud
from portal.providers.local import deliver_notice
from portal.sim.plugin import MACHINE_PREFIX as _PREFIX

__all__ = ["MACHINE_ENV", "Machine", "SimulatedMachines", "load_cloud"]

#: Set in a simulated machine's node environment: the machine's id.
MACHINE_ENV = "PORTAL_SIM_MACHINE"


def load_cloud(data_file: str | None) -> SimulatedCloud:
    """The simulated cloud: the bundled one, or the one a data file describes."""
    if data_file is None:
        return SimulatedCloud.bundled()
    path = Path(data_file).expanduser()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidSettingError(
            f"simulated_cloud_data names {str(path)!r}, which cannot be read as JSON "
            f"({type(exc).__name__}: {exc}); fix the file (the bundled simulated.json of "
            "portal-policies shows the form), or unset PORTAL_SIMULATED_CLOUD_DATA",
            details={"setting": "simulated_cloud_data", "value": str(path)},
        ) from None
    return SimulatedCloud(data)


@attrs.frozen(kw_only=True)
class Machine:
    """One simulated machine, as its ``machine.json`` records it."""

    id: str
    offer: Offer
    directory: Path
    provisioned_at: float
    job_id: str | None = None
    attempt: int | None = None
    reclaimed_at: float | None = None
    silent_at: float | None = None
    released_at: float | None = None
    #: The ``--on`` the job was placed here with (the user's choice: an exact one keeps it here
    #: whatever its state; any keeps a cheaper or return move to the machines it names).
    on: str | None = None
    #: The job was placed here with ``--no-spot`` (the user's choice: it is not moved to spot).
    no_spot: bool = False

    @property
    def name(self) -> str:
        """As an attempt records its machine: ``sim-0002 spot aws c7i.large (us-east-1)``."""
        return f"{self.id} {self.offer.describe()}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pool": self.offer.pool,
            "offer": self.offer.describe(),
            "provider": self.offer.provider,
            "region": self.offer.region,
            "type": self.offer.machine_type.name,
            "capacity": str(self.offer.capacity),
            "notice_s": self.offer.notice_s,
            "price_per_hour": self.offer.price_per_hour,
            "provisioned_at": self.provisioned_at,
            "job": self.job_id,
            "attempt": self.attempt,
            "reclaimed_at": self.reclaimed_at,
            "silent_at": self.silent_at,
            "released_at": self.released_at,
            "on": self.on,
            "no_spot": self.no_spot,
        }


class SimulatedMachines:
    """Provisions, reclaims, silences and releases the simulated cloud's machines."""

    def __init__(self, plane: ControlPlane, cloud: SimulatedCloud | None = None) -> None:
        self.plane = plane
        self.cloud = cloud or load_cloud(plane.settings.simulated_cloud_data)
        self.root = plane.home / "sim" / "machines"

    # --- records -------------------------------------------------------------------------------

    def _write(self, machine: Machine) -> Machine:
        tmp = machine.directory / "machine.json.tmp"
        tmp.write_text(json.dumps(machine.to_json(), indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(machine.directory / "machine.json")
        return machine

    def _read(self, directory: Path) -> Machine:
        data = json.loads((directory / "machine.json").read_text(encoding="utf-8"))
        return Machine(
            id=data["id"],
            offer=self.cloud.offer(data["pool"]),
            directory=directory,
            provisioned_at=data["provisioned_at"],
            job_id=data["job"],
            attempt=data["attempt"],
            reclaimed_at=data["reclaimed_at"],
            silent_at=data["silent_at"],
            released_at=data["released_at"],
            on=data.get("on"),
            no_spot=bool(data.get("no_spot", False)),
        )

    def all(self) -> list[Machine]:
        if not self.root.is_dir():
            return []
        return [
            self._read(d) for d in sorted(self.root.iterdir()) if (d / "machine.json").is_file()
        ]

    def get(self, ref: str) -> Machine:
        """A machine by id (``sim-0002``), or the machine a job's latest attempt runs on."""
        if ref.startswith(_PREFIX) and (self.root / ref / "machine.json").is_file():
            return self._read(self.root / ref)
        job = self.plane.job(ref)  # raises, naming the job, when there is none
        found = self.of_job(job.id)
        if found is None:
            raise InvalidArgumentError(
                f"job {job.id} runs on no simulated machine (its latest attempt is on this "
                "machine, not in the simulated cloud); move it there first with "
                f"`portal move {ref} --on SPEC`",
                details={"job": job.id},
            )
        return found

    def of_job(self, job_id: str) -> Machine | None:
        """The simulated machine of the job's latest attempt, if it has one."""
        attempts = self.plane.store.attempts(job_id)
        if not attempts:
            return None
        latest = attempts[-1]
        for machine in self.all():
            if machine.job_id == job_id and machine.attempt == latest.number:
                return machine
        return None

    # --- what the cloud does -------------------------------------------------------------------

    def provision(self, offer: Offer) -> Machine:
        """A new machine for ``offer`` (its directory made, nothing running on it yet)."""
        self.cloud.offer(offer.pool)  # refuses an offer this cloud does not have
        self.root.mkdir(parents=True, exist_ok=True)
        number = len(list(self.root.glob(f"{_PREFIX}*"))) + 1
        while True:
            directory = self.root / f"{_PREFIX}{number:04d}"
            try:
                directory.mkdir()
                break
            except FileExistsError:
                number += 1
        machine = Machine(
            id=directory.name,
            offer=offer,
            directory=directory,
            provisioned_at=self.plane.clock.now(),
        )
        return self._write(machine)

    def assign(
        self,
        machine: Machine,
        job_id: str,
        attempt: int,
        *,
        on: str | None = None,
        no_spot: bool = False,
    ) -> Machine:
        """Record that the job's attempt runs on ``machine`` (placed by an ``--on``, or with
        ``--no-spot``)."""
        return self._write(
            attrs.evolve(machine, job_id=job_id, attempt=attempt, on=on, no_spot=no_spot)
        )

    def _pid_file(self, machine: Machine) -> Path | None:
        if machine.job_id is None or machine.attempt is None:
            return None
        return self.plane.paths(machine.job_id).attempt(machine.attempt) / "node.pid"

    def _node_pid(self, machine: Machine) -> int | None:
        pid_file = self._pid_file(machine)
        if pid_file is None or not node_alive(pid_file):
            return None
        with contextlib.suppress(OSError, ValueError):
            return int(pid_file.read_text())
        return None

    def running(self, machine: Machine) -> bool:
        """Whether the machine's node is still there (it may be silent)."""
        return machine.released_at is None and self._node_pid(machine) is not None

    def reclaim(self, ref: str, *, seconds: float | None = None) -> Notice:
        """Reclaim a spot machine: a notice of its offer's length goes to its node.

        The pool is recorded as reclaimed in the control plane (left out of new placements for
        30 minutes) and the job's log says which machine the cloud takes back.
        """
        machine = self.get(ref)
        offer = machine.offer
        if offer.notice_s is None:
            raise InvalidArgumentError(
                f"{machine.name} is not a spot machine: the simulated cloud reclaims only spot "
                "machines (release it instead)",
                details={"machine": machine.id},
            )
        if machine.job_id is None or not self.running(machine):
            raise InvalidArgumentError(
                f"{machine.name} runs no job now, so there is no node to give a notice to",
                details={"machine": machine.id},
            )
        length = offer.notice_s if seconds is None else seconds
        now = self.plane.clock.now()
        notice = deliver_notice(
            self.plane.paths(machine.job_id).notices,
            seconds=length,
            clock=self.plane.clock,
            reason=f"the simulated cloud reclaims {machine.name}",
        )
        self.plane.store.record_reclaim(offer.pool, now, machine.id)
        self.plane.record(
            machine.job_id,
            "reclaimed",
            f"the simulated cloud reclaims {machine.name} with a {length:g} s notice; its pool "
            "is left out of new placements for 30 minutes",
            machine=machine.id,
            pool=offer.pool,
            notice_s=length,
        )
        self._write(attrs.evolve(machine, reclaimed_at=now))
        return notice

    def silence(self, ref: str) -> Machine:
        """The machine goes silent: its node and job stop, and nothing is heard from it."""
        machine = self.get(ref)
        pid = self._node_pid(machine)
        if pid is None:
            raise InvalidArgumentError(
                f"{machine.name} runs no node now, so there is nothing to silence",
                details={"machine": machine.id},
            )
        os.killpg(pid, signal.SIGSTOP)  # the node leads its own session: its job stops too
        return self._write(attrs.evolve(machine, silent_at=self.plane.clock.now()))

    def release(self, ref: str, *, kill: bool = True) -> Machine:
        """The machine is gone: its node and job (if any) are killed (``kill=False``: by a node
        that is ending on its own, releasing its machine)."""
        machine = self.get(ref)
        pid = self._node_pid(machine) if kill else None
        if pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        if machine.released_at is not None:
            return machine
        return self._write(attrs.evolve(machine, released_at=self.plane.clock.now()))

    def release_idle(self) -> list[Machine]:
        """Release every machine whose node has ended (a reclaimed machine once its job left)."""
        ended = []
        for machine in self.all():
            pid_file = self._pid_file(machine)
            # node_alive is None while a node has not started yet: that machine is not idle.
            if machine.released_at is None and pid_file and node_alive(pid_file) is False:
                ended.append(self.release(machine.id))
        return ended
