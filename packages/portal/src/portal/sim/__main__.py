"""``python -m portal.sim ACTION MACHINE-OR-JOB``: what the simulated cloud does to a machine.

``reclaim`` gives its node a notice of the offer's length (``--seconds`` to shorten it), ``silence``
stops its node and job so nothing is heard from it, ``release`` takes the machine away, ``list``
prints every machine. A job's name or id stands for the machine its latest attempt runs on.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from portal.control.plane import ControlPlane
from portal.core.errors import PortalError
from portal.sim.machines import SimulatedMachines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m portal.sim", description="The simulated cloud's console."
    )
    parser.add_argument("action", choices=["reclaim", "silence", "release", "list"])
    parser.add_argument("ref", nargs="?", metavar="MACHINE-OR-JOB")
    parser.add_argument("--seconds", type=float, help="a shorter notice than the offer's")
    options = parser.parse_args(argv)
    try:
        machines = SimulatedMachines(ControlPlane())
        if options.action == "list":
            for machine in machines.all():
                where = (
                    f"job {machine.job_id} attempt {machine.attempt}" if machine.job_id else "idle"
                )
                if machine.released_at is not None:
                    state = "released"
                elif not machines.running(machine):
                    state = "up, its node ended"
                else:
                    state = "silent" if machine.silent_at is not None else "up"
                print(f"{machine.name}: {state}, {where}")
            return 0
        if options.ref is None:
            parser.error(f"{options.action} needs a machine id (sim-0001) or a job")
        if options.action == "reclaim":
            notice = machines.reclaim(options.ref, seconds=options.seconds)
            print(f"notice {notice.id} delivered: the machine goes in {notice.notice_s:g} s")
        elif options.action == "silence":
            print(f"{machines.silence(options.ref).name} is silent")
        else:
            print(f"{machines.release(options.ref).name} is released")
    except PortalError as exc:
        print(f"portal.sim: {exc} [{exc.code}]", file=sys.stderr)
        return 64
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
