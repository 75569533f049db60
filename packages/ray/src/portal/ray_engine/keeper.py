"""``python -m portal.ray_engine.keeper MARK``: the jobs of a Ray node die with the node.

Portal's node process runs in a session of its own (it outlives the ``portal`` command that
started it), so neither the Ray worker that hosts the node agent nor ``PR_SET_PDEATHSIG`` takes
it down when the Ray node goes. On a real machine a lost node takes everything on it; without
that, a job whose Ray node was declared dead could go on writing checkpoints while its
successor resumes elsewhere (two attempts of one job at once).

So the agent starts this keeper, which detaches itself (a dying Ray worker kills its direct
children, the keeper among them, but not their orphans). Every process the agent starts carries
the node's mark in its environment (``PORTAL_RAY_NODE=<node id>``, inherited by Portal's node
and the job), and when the agent's process is gone (the Ray node died, its raylet was killed,
or the actor was killed) the keeper kills every process that carries the mark, then exits. The
agent is watched by its pid and start time rather than through ``PR_SET_PDEATHSIG``, which
fires when the *thread* that started the child exits, and Ray runs actor methods on threads.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from portal.ray_engine.resources import MARK_ENV

__all__ = ["kill_marked", "main"]
_POLL_S = 0.1


def _marked(mark: str) -> list[int]:
    entry = f"{MARK_ENV}={mark}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue  # gone already, or not ours to read
        if entry in environ.split(b"\0"):
            found.append(int(proc.name))
    return found


def kill_marked(mark: str) -> int:
    """SIGKILL every process carrying ``mark`` until none is left; returns how many died."""
    killed: set[int] = set()
    for _ in range(50):  # a process may fork while its siblings die: look again
        pids = _marked(mark)  # a zombie's environment reads empty: only the living match
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.02)
    return len(killed)


def _started(pid: int) -> str | None:
    """The process's start time (clock ticks since boot): a pid reused later has another one.
    None when the process is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def watch(mark: str, pid: int) -> None:
    """Wait for process ``pid`` to end, then kill every process carrying ``mark``."""
    started = _started(pid)
    while started is not None and _started(pid) == started:
        time.sleep(_POLL_S)
    kill_marked(mark)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[1].isdigit():
        print("usage: python -m portal.ray_engine.keeper NODE_ID AGENT_PID", file=sys.stderr)
        return 64
    mark, pid = args[0], int(args[1])
    # Leave the agent's family: a dying Ray worker kills its own children first, which would
    # take the keeper before it could act. Detached, it is nobody's child but init's.
    if os.fork():
        return 0
    os.setsid()
    signal.signal(signal.SIGTERM, lambda *_: None)  # only the agent's end ends the keeper
    watch(mark, pid)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
