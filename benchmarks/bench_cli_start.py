"""How fast the ``portal`` command answers, against ``python -c pass`` in the same run.
Run: ``python benchmarks/bench_cli_start.py`` (with every Portal package installed).

Each figure is the median wall time of fresh processes, the way a user meets it: the console
script ``portal`` beside this interpreter, from exec to exit. Bytecode is written by a first,
unmeasured run (an installed package has its ``.pyc`` files; see bench_import.py). ``portal jobs``
runs on a fresh PORTAL_HOME holding three finished jobs, so it opens the control plane, reads
their rows and prints a table (rich).

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
        peer = measure([sys.executable, "-c", "pass"], env)
        print(f"{'python -c pass (peer)':<24} {peer * 1000:7.1f} ms")
        for label, argv, target in (
            ("portal --help", [portal, "--help"], 0.150),
            ("portal --version", [portal, "--version"], 0.150),
            ("portal jobs (3 jobs)", [portal, "jobs"], 0.300),
        ):
            took = measure(argv, env)
            verdict = "within" if took <= target else "OVER"
            print(
                f"{label:<24} {took * 1000:7.1f} ms  {took / peer:5.1f}x the peer  "
                f"({verdict} the {target * 1000:.0f} ms target)"
            )


if __name__ == "__main__":
    main()
