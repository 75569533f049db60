"""Fault injection: kills with -9 at random points lose no job that had a complete checkpoint.

Each trial runs ``big.py`` (20 MB of state from step 10) with a periodic checkpoint every second,
waits for the first one, then kills with SIGKILL, at a random moment of one of three windows (a
periodic checkpoint's write and upload, a notice's pause and streamed upload, a resume's download
and restore), what its shape names:

- ``job``: the job's process;
- ``node``: its node (the job's process dies with it);
- ``both``: the two at once;
- ``again``: one of those, then, once the job has settled, a second kill (of a target drawn
  again) at a random moment of the resume its user starts.

Whatever the kills hit, the job is then resumed as its user would (``portal resume JOB``; a job
whose process died outside any checkpoint is ``failed`` like any script killed, and resumes from a
checkpoint the user names) and must end with exactly the output of an uninterrupted run.

The kill points come from a seed printed with each trial (``PORTAL_TEST_SEED=N`` reproduces
them). CI runs ``PORTAL_FAULT_TRIALS`` trials (default 2), the shapes in turn from a place the
seed picks, so a different sample each landing; ``PORTAL_FAULT_TRIALS=80`` is the full campaign,
20 trials of each shape. The summary line of each trial (shape, targets, windows, delays, what
each kill hit, how it was resumed) goes to ``PORTAL_FAULT_REPORT`` when set.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import PortalCli, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.one_python]

SEED = int(os.environ.get("PORTAL_TEST_SEED") or random.SystemRandom().randrange(1 << 30))
TRIALS = int(os.environ.get("PORTAL_FAULT_TRIALS", "2"))
SIZE = str(20_000_000)
#: Each window, and the span its kill point is drawn from (s): a 20 MB pause is written and
#: stored within about half a second here, a restore within about one, and periodic checkpoints
#: come every second.
WINDOWS = {"periodic": 1.2, "notice": 0.5, "restore": 0.9}
SETTLED = ("suspended", "lost", "failed", "done")
SHAPES = ("job", "node", "both", "again")
_plain: dict[str, str] = {}


def _status(portal: PortalCli, job: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(portal("status", job, "--json").stdout)
    return result


def _events(portal: PortalCli, job: str) -> list[dict[str, Any]]:
    from portal.control.plane import ControlPlane
    from portal.core.settings import Settings

    plane = ControlPlane(Settings.load({"home": str(portal.home)}, environ={}))
    try:
        return [{"kind": e.kind, **e.data} for _, e in plane.store.events(job)]
    finally:
        plane.store.close()


def _alive(pid: int) -> bool:
    """Running (a zombie, dead and not yet reaped, is not: a kill of it hits nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _pids_of(portal: PortalCli, job: str, target: str, attempt: int) -> list[tuple[str, int]]:
    """The live processes of ``attempt`` to kill: the job's (its ``started`` event), the
    node's, or both. A job process not started yet (a resume still downloading): the node."""
    node = int((portal.home / "jobs" / job / "attempts" / str(attempt) / "node.pid").read_text())
    found: list[tuple[str, int]] = []
    if target in ("job", "both"):
        started = [e for e in _events(portal, job) if e["kind"] == "started" and "pid" in e]
        if len(started) == attempt and _alive(int(started[-1]["pid"])):
            found.append(("job", int(started[-1]["pid"])))
    if (target != "job" or not found) and _alive(node):
        found.append(("node", node))
    return found


def _kill_at(portal: PortalCli, job: str, target: str, delay: float, attempt: int) -> str:
    pid_file = portal.home / "jobs" / job / "attempts" / str(attempt) / "node.pid"
    wait_until(f"attempt {attempt}'s node", pid_file.exists, 30)
    time.sleep(delay)
    found = _pids_of(portal, job, target, attempt)
    if not found:
        return f"attempt {attempt} had ended: nothing to kill"
    hit = []
    for what, pid in found:  # one after the other at once: both die within a millisecond
        try:
            os.kill(pid, signal.SIGKILL)
            hit.append(f"{what} {pid}")
        except ProcessLookupError:
            hit.append(f"{what} already gone")
    return f"{' and '.join(hit)} of attempt {attempt} killed"


def _settle(portal: PortalCli, job: str) -> str:
    return str(
        wait_until(
            "the job to settle", lambda: (s := _status(portal, job)["state"]) in SETTLED and s, 90
        )
    )


def _resume_args(portal: PortalCli, job: str, state: str, line: str, hit: str) -> list[str]:
    """How its user resumes the settled job: a ``failed`` one from the checkpoint they name."""
    last = _status(portal, job)["last_checkpoint"]
    assert last is not None, (
        f"{line}: {hit}; the job is {state} with no complete checkpoint\n"
        + portal("explain", job).stdout
    )
    return ["--checkpoint", last["id"]] if state == "failed" else []


def _whom(target: str) -> str:
    return "both" if target == "both" else f"the {target}"


def _attempts(portal: PortalCli, job: str) -> int:
    return len(list((portal.home / "jobs" / job / "attempts").iterdir()))


@pytest.mark.parametrize("trial", range(TRIALS))
def test_a_kill_at_a_random_point_loses_no_job(portal: PortalCli, trial: int) -> None:
    rng = random.Random(f"{SEED}:{trial}")
    shape = SHAPES[(SEED + trial) % len(SHAPES)]
    target = rng.choice(("job", "node", "both")) if shape == "again" else shape
    window = rng.choice(sorted(WINDOWS))
    delay = rng.uniform(0.0, WINDOWS[window])
    line = (
        f"seed={SEED} trial={trial} shape={shape}: kill {_whom(target)} in the {window} window "
        f"after {delay:.2f} s"
    )
    second_target = rng.choice(("job", "node", "both"))
    second_delay = rng.uniform(0.0, WINDOWS["restore"])
    if shape == "again":
        line += f", then {_whom(second_target)} in the resume after {second_delay:.2f} s"
    print(f"{line} (PORTAL_TEST_SEED={SEED} reproduces)")
    if "out" not in _plain:
        _plain["out"] = portal.plain("big.py", SIZE)
    expected = _plain["out"]

    job = portal("run", "--detach", "--checkpoint-every", "1s", "big.py", SIZE).stdout.strip()
    portal.wait_for_output(job, "step 12\n")  # the big state exists
    wait_until(
        "a periodic checkpoint",
        lambda: any(e["kind"] == "checkpoint-periodic" for e in _events(portal, job)),
    )
    attempt = 1
    if window == "notice":
        portal("notice", job)
    elif window == "restore":
        attempt = 2
        portal("notice", job)
        assert portal("wait", job, "--timeout", "90").stdout.strip() == "suspended"
        resumed = portal("resume", "--detach", job)
        assert resumed.returncode == 0, resumed.stderr
    hit = _kill_at(portal, job, target, delay, attempt)

    state = _settle(portal, job)
    how = "finished before the kill"
    if state != "done" and shape == "again":
        named = _resume_args(portal, job, state, line, hit)
        attempt = _attempts(portal, job) + 1
        resumed = portal("resume", "--detach", *named, job)
        assert resumed.returncode == 0, f"{line}: {hit}; resumed: {resumed.stderr}"
        hit += "; " + _kill_at(portal, job, second_target, second_delay, attempt)
        state = _settle(portal, job)
    if state != "done":
        named = _resume_args(portal, job, state, line, hit)
        how = f"{state}, resumed" + (f" from {named[1]} (named)" if named else "")
        resumed = portal("resume", *named, job, timeout=180)
        assert resumed.returncode == 0, f"{line}: {hit}; {how}: {resumed.stderr}"
    logged = portal("logs", job).stdout
    _report(f"{line}: {hit}; {how}; identical={logged == expected}")
    assert logged == expected, f"{line}: {hit}; {how}\n" + portal("explain", job).stdout


def _report(text: str) -> None:
    print(text)
    path = os.environ.get("PORTAL_FAULT_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(text + "\n")
