"""Portal's demo on the embedded local defaults (no cloud account needed).

1. runs examples/demo/train.py once without Portal, as the reference;
2. runs it with `portal run`, delivers a preemption notice partway (`portal notice`), and the job
   pauses at a safe point, checkpoints (encrypted, to the local store) and is suspended;
3. resumes it with `portal resume`, in a new process, from the statement after the pause;
4. shows that the combined output equals the uninterrupted run, byte for byte.

Portal's state for the demo lives in .portal-demo/ (its PORTAL_HOME), so ~/.portal is untouched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOME = HERE.parents[1] / ".portal-demo"


def portal(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PORTAL_HOME": str(HOME)}
    result = subprocess.run(
        [sys.executable, "-m", "portal.cli", *args],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check and result.returncode not in (0, 75):
        sys.exit(f"demo failed: portal {' '.join(args)} -> {result.returncode}\n{result.stderr}")
    return result


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def main() -> int:
    shutil.rmtree(HOME, ignore_errors=True)
    say("reference: python train.py (no Portal)")
    started = time.monotonic()
    reference = subprocess.run(
        [sys.executable, "train.py"], cwd=HERE, capture_output=True, text=True, check=True
    ).stdout
    print(reference.splitlines()[-1], f"({time.monotonic() - started:.1f} s)")

    say("portal run --detach --name demo train.py")
    job = portal("run", "--detach", "--name", "demo", "train.py").stdout.strip()
    print("job", job)
    while "epoch  20" not in portal("logs", job).stdout:
        time.sleep(0.1)

    say("portal notice demo   (the provider says: this machine goes in 120 s)")
    print(portal("notice", job).stderr.strip())
    print("portal wait demo ->", portal("wait", job, "--timeout", "60").stdout.strip())
    logs = portal("logs", job).stdout.splitlines()
    print(f"paused after {len(logs)} lines of output; last: {logs[-1]!r}")

    say("portal explain demo")
    print(portal("explain", job).stdout.rstrip())

    say("portal resume demo   (a new process continues from the statement after the pause)")
    resumed = portal("resume", job)
    print(resumed.stdout.splitlines()[-1])

    say("result")
    combined = portal("logs", job).stdout
    if combined != reference:
        print("MISMATCH: the resumed job's output differs from the uninterrupted run")
        return 1
    print(
        f"identical: {len(combined.splitlines())} lines, interrupted once, resumed once, "
        "same bytes as the uninterrupted run"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
