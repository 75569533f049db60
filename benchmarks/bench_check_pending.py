"""Benchmark of what the checkpoint check costs a program that gives it no pause point for long.

    python benchmarks/bench_check_pending.py                # about a minute of work, twice each
    python benchmarks/bench_check_pending.py --seconds 15   # shorter

The program spends its time in list comprehensions, generator expressions and library calls
(``sorted``, ``json``, ``re``, ``hashlib``): code where no pause point comes for a long while, so
a check asked at start stays pending through it (the issue this measures: line tracing left on
while the check waited made such a program 13x slower). Peer: the same program run plainly by
the same interpreter, in the same run. Rows: the plain and the ``portal run`` wall time (the check
on, at its default settings, asked at start; the node, runtime and control plane included), best
of ``--rounds`` each, alternating; the ratio. Target: <= 1.05x.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROGRAM = """\
import hashlib, json, re, sys

rounds = int(sys.argv[1])
total = 0
for r in range(rounds):
    squares = [x * x for x in range(400_000)]
    total += sum(v % 7 for v in squares)
    ordered = sorted(squares, key=lambda v: -v)[:10]
    text = json.dumps({str(i): i for i in range(50_000)})
    total += len(re.findall(r'"(\\d+)7"', text))
    digest = hashlib.sha256(text.encode()).hexdigest()
    total += len({c for c in digest})
print(total, ordered[0])
"""


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True, timeout=1800)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="plain run time to aim at")
    parser.add_argument("--rounds", type=int, default=2, help="tries of each (best kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        (work / "busy.py").write_text(PROGRAM)
        env = {**os.environ, "PORTAL_HOME": str(Path(tmp) / "home")}
        env.pop("PORTAL_CAPTURE_PROBE", None)  # the check at its default: on
        one = _run([sys.executable, "busy.py", "1"], work, env)
        rounds = max(1, round(args.seconds / max(one, 1e-3)))
        plain_cmd = [sys.executable, "busy.py", str(rounds)]
        portal_cmd = [sys.executable, "-m", "portal.cli", "run", "busy.py", str(rounds)]
        plain = portal = float("inf")
        for attempt in range(args.rounds):
            order = [("plain", plain_cmd), ("portal", portal_cmd)]
            for name, command in order if attempt % 2 == 0 else order[::-1]:
                took = _run(command, work, env)
                if name == "plain":
                    plain = min(plain, took)
                else:
                    portal = min(portal, took)
    print(f"check pending benchmark (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")
    print(f"  program: {rounds} rounds of comprehensions and library calls")
    print(f"  plain          {plain:8.2f} s")
    print(f"  portal run     {portal:8.2f} s (check on, asked at start)")
    print(f"  ratio          {portal / plain:8.3f}x (target <= 1.05x)")


if __name__ == "__main__":
    main()
