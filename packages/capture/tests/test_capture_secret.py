"""The runtime proves itself to its node: the per-attempt secret the node hands it
(PORTAL_RUNTIME_SECRET) comes back in its greeting, and leaves the environment before the script
runs (the script never sees it; no checkpoint of the environment carries it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _harness import connect, runtime, short_dir


def test_the_greeting_carries_the_secret_the_script_never_sees(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        "import os, sys, time\n"
        "print('seen:', os.environ.get('PORTAL_RUNTIME_SECRET'), flush=True)\n"
        "sys.stdin.readline()\n"
    )
    sock = os.path.join(short_dir(), "c.sock")
    env = {**os.environ, "PORTAL_RUNTIME_SECRET": "s3cr3t-for-this-attempt"}
    proc = subprocess.Popen(
        runtime("run", "--control", sock, "--checkpoint", str(tmp_path / "c.portal"), str(script)),
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        control = connect(proc, sock)
        assert control is not None
        assert control.hello["event"] == "hello"
        assert control.hello["secret"] == "s3cr3t-for-this-attempt"
        control.close()
        out, err = proc.communicate(b"\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert out.decode() == "seen: None\n"


def test_without_a_secret_the_greeting_says_none() -> None:
    code = (
        "from portal.runtime.protocol import take_secret\n"
        "env = {'PORTAL_RUNTIME_SECRET': 'x'}\n"
        "assert take_secret(env) == 'x' and env == {}\n"
        "assert take_secret({'PORTAL_RUNTIME_SECRET': 'y'}) == 'x'  # taken once per process\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
