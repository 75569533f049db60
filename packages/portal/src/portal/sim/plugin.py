"""The simulated cloud as a provider plugin: it answers the lost-job rules' question, whether a
machine still exists, for its own machines, through the same hook as the real providers'
(``portal_machine_exists``), so ``python -m portal.sim release`` and ``silence`` are seen the way a
real cloud's are. Light on purpose (every process that loads plugins imports it): it reads the
machine's record and nothing else."""

from __future__ import annotations

import json
import os
from pathlib import Path

from portal.core.hookspecs import hookimpl

__all__ = ["MACHINE_PREFIX", "machine_exists", "portal_machine_exists"]

#: The simulated cloud's machine ids: ``sim-0002``.
MACHINE_PREFIX = "sim-"


def machine_exists(home: str | os.PathLike[str], machine: str) -> bool | None:
    """What the simulated cloud's API says of ``machine`` (as an attempt records it: ``sim-0002
    spot aws ...``): gone once released, there otherwise (a silent machine is there, its node
    unheard); None for a machine that is not the simulated cloud's."""
    machine_id = machine.split(" ", 1)[0]
    if not machine_id.startswith(MACHINE_PREFIX):
        return None
    record = Path(home) / "sim" / "machines" / machine_id / "machine.json"
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("released_at") is None


@hookimpl
def portal_machine_exists(machine: str, home: str) -> bool | None:
    return machine_exists(home, machine)
