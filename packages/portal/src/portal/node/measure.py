"""The memory a job's process holds now, as the node reports it ("its resident and GPU memory now").

Read from ``/proc``: the process's ``VmRSS``. GPU memory joins it when a GPU reader is installed;
on a machine without one the figure is the resident memory alone (it overstates a checkpoint
either way, which is why Portal acts on it alone only a quarter over a bound).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["child_pids", "resident_bytes"]


def resident_bytes(pid: int) -> int | None:
    """The process's resident memory now (``VmRSS`` of ``/proc/PID/status``), or None."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def child_pids(pid: int | None = None) -> list[int]:
    """The direct children of ``pid`` (default: this process), e.g. a node's job process."""
    me = os.getpid() if pid is None else pid
    try:
        text = Path(f"/proc/{me}/task/{me}/children").read_text()
    except OSError:
        return []
    return [int(word) for word in text.split()]
