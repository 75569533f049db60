"""A SIGTERM that arrives while ``python -m portal.runtime`` is still starting (its imports, the
plugins; for ``resume`` the checkpoint's loading) pauses the program at its first safe point
instead of ending the process; one during the script's own slow imports pauses at the first line
after them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _harness import EXIT_PAUSED, plain_run, runtime, short_dir

CORPUS = Path(__file__).parent / "corpus" / "startup"
SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def _caught(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (``SigCgt`` in /proc)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & SIGTERM_BIT)
    except OSError:
        pass
    return False


def _start(cmd: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)


def _signal_early(proc: subprocess.Popen[bytes], delay: float) -> None:
    """SIGTERM ``delay`` seconds after the process can first hear it: its early handler is in
    place a few milliseconds into the runtime's start-up, a few tenths of a second before the
    engine arms. (Before that the interpreter has not run any Python code yet.)"""
    end = time.monotonic() + 30
    while not _caught(proc.pid):
        assert proc.poll() is None, "the runtime ended before it could hear a SIGTERM"
        assert time.monotonic() < end
        time.sleep(0.0002)
    if delay:
        time.sleep(delay)
    proc.send_signal(signal.SIGTERM)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    for path in CORPUS.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    return tmp_path


@pytest.mark.parametrize("delay", [0.0, 0.002, 0.005, 0.02, 0.1])
def test_a_notice_during_run_startup_pauses_at_the_first_line(work: Path, delay: float) -> None:
    ckpt = os.path.join(short_dir(), "ck.portal")
    proc = _start(runtime("run", "--checkpoint", ckpt, "steps.py"), work)
    _signal_early(proc, delay)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PAUSED, err.decode()
    if delay <= 0.005:  # well before the engine arms: paused before the script's first line
        assert out == b""
    resumed = subprocess.run(runtime("resume", ckpt), capture_output=True, cwd=work, timeout=60)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert out + resumed.stdout == plain_run(work / "steps.py").stdout


def test_a_notice_right_after_the_process_starts(work: Path) -> None:
    """Sent the moment Popen returns: the interpreter may not have run any Python code yet, and
    then the default action ends it (nothing is written); otherwise it pauses as above."""
    ckpt = os.path.join(short_dir(), "ck.portal")
    proc = _start(runtime("run", "--checkpoint", ckpt, "steps.py"), work)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (EXIT_PAUSED, -signal.SIGTERM), err.decode()
    if proc.returncode == -signal.SIGTERM:
        assert out == b"" and not os.path.exists(ckpt)
        return
    resumed = subprocess.run(runtime("resume", ckpt), capture_output=True, cwd=work, timeout=60)
    assert resumed.stdout == plain_run(work / "steps.py").stdout


@pytest.mark.parametrize("delay", [0.0, 0.005, 0.05])
def test_a_notice_during_resume_startup_pauses_again(work: Path, delay: float) -> None:
    ckpt = os.path.join(short_dir(), "ck.portal")
    proc = _start(runtime("run", "--checkpoint", ckpt, "steps.py"), work)
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the script is running: pause it there
    proc.send_signal(signal.SIGTERM)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PAUSED, err.decode()
    before = Path(ckpt).read_bytes()

    proc = _start(runtime("resume", ckpt), work)
    _signal_early(proc, delay)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PAUSED, err.decode()
    if delay <= 0.005:  # well before the engine arms: paused where the checkpoint had paused
        assert out == b""
    assert Path(ckpt).read_bytes() != before  # a new pause wrote a new checkpoint

    resumed = subprocess.run(runtime("resume", ckpt), capture_output=True, cwd=work, timeout=60)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert first + rest + out + resumed.stdout == plain_run(work / "steps.py").stdout


def test_a_resume_killed_before_it_can_hear_the_notice_leaves_its_checkpoint(work: Path) -> None:
    ckpt = os.path.join(short_dir(), "ck.portal")
    proc = _start(runtime("run", "--checkpoint", ckpt, "steps.py"), work)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PAUSED
    before = Path(ckpt).read_bytes()
    proc = _start(runtime("resume", ckpt), work)
    proc.kill()  # as a SIGTERM in the interpreter's own start-up would
    proc.communicate(timeout=60)
    assert Path(ckpt).read_bytes() == before
    resumed = subprocess.run(runtime("resume", ckpt), capture_output=True, cwd=work, timeout=60)
    assert first + rest + resumed.stdout == plain_run(work / "steps.py").stdout


def test_a_notice_during_the_scripts_own_imports_pauses_after_them(work: Path) -> None:
    ckpt = os.path.join(short_dir(), "ck.portal")
    proc = _start(runtime("run", "--checkpoint", ckpt, "slow_imports.py"), work)
    assert proc.stdout is not None
    seen = proc.stdout.readline() + proc.stdout.readline()
    assert seen == b"before the import\nslowmod: importing\n"
    time.sleep(0.1)  # inside the module's half-second import
    proc.send_signal(signal.SIGTERM)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PAUSED, err.decode()
    assert rest == b"slowmod: imported\n"  # the import finished; the line after it did not run
    resumed = subprocess.run(runtime("resume", ckpt), capture_output=True, cwd=work, timeout=60)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert seen + rest + resumed.stdout == plain_run(work / "slow_imports.py").stdout


def test_a_notice_during_startup_of_a_script_with_slow_imports(work: Path) -> None:
    ckpt = os.path.join(short_dir(), "ck.portal")
    proc = _start(runtime("run", "--checkpoint", ckpt, "slow_imports.py"), work)
    _signal_early(proc, 0.01)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PAUSED, err.decode()
    assert out == b""
    resumed = subprocess.run(runtime("resume", ckpt), capture_output=True, cwd=work, timeout=60)
    assert resumed.stdout == plain_run(work / "slow_imports.py").stdout
