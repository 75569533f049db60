"""How fast the ``portal`` command answers, against ``python -c pass`` in the same run.
Run: ``python benchmarks/bench_cli_start.py`` (with every Portal package installed).

Each figure is the median wall time of fresh processes, the way a user meets it: the console
script ``portal`` beside this interpreter, from exec to exit. Bytecode is written by a first,
unmeasured run (an installed package has its ``.pyc`` files; see bench_import.py). ``portal jobs``
runs on a fresh PORTAL_HOME holding three finished jobs, so it opens the control plane, reads
their rows and prints a table (rich); then on one holding 100 jobs, each a copy of the records of
a real job that was suspended by a notice and resumed (two attempts, a checkpoint and the events
of a notice), so each row is read as a real one is.

Targets (issue 26): ``portal --help`` <= 150 ms and ``portal jobs`` <= 300 ms.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 15
SCRIPT = "print('ok')\n"
#: Runs long enough for a notice to suspend it: its records are copied into the 100-job home.
STEPS = (
    "import time\n"
    "for step in range(40):\n"
    "    print('step', step, flush=True)\n"
    "    time.sleep(0.05)\n"
)
MANY = 100


def _portal() -> str:
    command = Path(sys.executable).with_name("portal")
    if not command.exists():
        raise SystemExit(f"no portal command beside {sys.executable}: install portal-spot there")
    return str(command)


def measure(argv: list[str], env: dict[str, str]) -> float:
    """Median seconds of ``argv`` over RUNS fresh processes (after one unmeasured run)."""
    subprocess.run(argv, env=env, capture_output=True, check=True)
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    portal = _portal()
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        work = Path(scratch) / "work"
        work.mkdir()
        (work / "hello.py").write_text(SCRIPT)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PORTAL_HOME"] = str(home)
        for _ in range(3):
            subprocess.run(
                [portal, "run", "hello.py"], cwd=work, env=env, capture_output=True, check=True
            )
        many_env = {**env, "PORTAL_HOME": str(Path(scratch) / "many")}
        _many_jobs(portal, work, many_env)
        peer = measure([sys.executable, "-c", "pass"], env)
        print(f"{'python -c pass (peer)':<24} {peer * 1000:7.1f} ms")
        for label, argv, target in (
            ("portal --help", [portal, "--help"], 0.150),
            ("portal --version", [portal, "--version"], 0.150),
            ("portal jobs (3 jobs)", [portal, "jobs"], 0.300),
            (f"portal jobs ({MANY} jobs)", [portal, "jobs"], 0.300),
        ):
            took = measure(argv, many_env if str(MANY) in label else env)
            verdict = "within" if took <= target else "OVER"
            print(
                f"{label:<24} {took * 1000:7.1f} ms  {took / peer:5.1f}x the peer  "
                f"({verdict} the {target * 1000:.0f} ms target)"
            )


def _many_jobs(portal: str, work: Path, env: dict[str, str]) -> None:
    """A home with MANY jobs: one real job suspended by a notice and resumed, then its job,
    attempts and events copied under new ids through the control store (what a listing reads)."""
    import attrs

    from portal.control.plane import ControlPlane
    from portal.control.store import new_job_id

    (work / "steps.py").write_text(STEPS)
    run = dict(cwd=work, env=env, capture_output=True, text=True, check=True)
    job = subprocess.run([portal, "run", "--detach", "steps.py"], **run).stdout.strip()
    time.sleep(0.8)
    subprocess.run([portal, "notice", job], **run)
    subprocess.run([portal, "wait", job, "--timeout", "60"], **run)
    subprocess.run([portal, "resume", job], **run)
    os.environ["PORTAL_HOME"] = env["PORTAL_HOME"]
    plane = ControlPlane()
    store = plane.store
    original = store.get_job(job)
    attempts = store.attempts(job)
    events = [event for _, event in store.events(job)]
    for _ in range(MANY - 1):
        copy = store.create_job(attrs.evolve(original, id=new_job_id(), name=None))
        for attempt in attempts:
            store.start_attempt(
                copy.id,
                machine=attempt.machine,
                at=attempt.started_at,
                resumed_from=attempt.resumed_from,
            )
            if attempt.ended_at is not None:
                store.end_attempt(
                    copy.id,
                    attempt.number,
                    state=attempt.state,
                    at=attempt.ended_at,
                    exit_code=attempt.exit_code,
                )
        for event in events:
            store.append_event(attrs.evolve(event, job_id=copy.id, id=None))
    store.close()
    import json

    rows = json.loads(subprocess.run([portal, "jobs", "--json"], **run).stdout)
    with_checkpoint = [r for r in rows if r["last_checkpoint"] and r["recoveries"] == 1]
    assert len(rows) == len(with_checkpoint) == MANY, (len(rows), len(with_checkpoint))


if __name__ == "__main__":
    main()
