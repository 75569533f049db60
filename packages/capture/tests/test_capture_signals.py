"""Signal handlers the program installed travel with the checkpoint: paused at any moment and
resumed, a script that signals itself prints what an uninterrupted run prints, including a
SIGTERM handler of its own (which then takes SIGTERM instead of Portal's pause). The runtime's
own signals stay the runtime's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _harness import CORPUS, EXIT_PAUSED, connect, runtime, short_dir

from portal.capture.extensions.signals import SignalHandlers

SCRIPT = CORPUS / "signals" / "handlers.py"


@pytest.mark.parametrize("pause_after", [b"2 ", b"8 "])  # before and after its SIGTERM handler
def test_handlers_continue_after_a_resume(tmp_path: Path, pause_after: bytes) -> None:
    expected = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=tmp_path, capture_output=True, check=True
    ).stdout
    sock = os.path.join(short_dir(), "c.sock")
    checkpoint = tmp_path / "job.portal"
    proc = subprocess.Popen(
        runtime("run", "--control", sock, "--checkpoint", str(checkpoint), str(SCRIPT)),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    control = connect(proc, sock)
    assert control is not None and proc.stdout is not None
    out = b""
    while not out.startswith(pause_after) and b"\n" + pause_after not in out:
        line = proc.stdout.readline()
        assert line
        out += line
    control.pause(within=30)
    assert proc.stderr is not None
    with proc.stdout, proc.stderr:  # through the reader readline used: communicate() would
        rest, err = proc.stdout.read(), proc.stderr.read()  # skip what it had read ahead
    proc.wait(timeout=60)
    control.close()
    assert proc.returncode == EXIT_PAUSED, err.decode()
    resumed = subprocess.run(
        runtime("resume", str(checkpoint)), cwd=tmp_path, capture_output=True, timeout=60
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert out + rest + resumed.stdout == expected


def test_the_runtimes_own_signals_and_handlers_are_not_carried() -> None:
    handlers = SignalHandlers()
    previous = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGIO)}

    class Engine:  # stands for the runtime's engine: its bound method is Portal's handler
        def on(self, signum: int, frame: object) -> None: ...

    Engine.__module__ = "portal.capture.engine"
    try:
        signal.signal(signal.SIGUSR1, lambda s, f: None)  # the runtime's wake signal
        signal.signal(signal.SIGIO, signal.SIG_IGN)
        signal.signal(signal.SIGUSR2, Engine().on)
        assert handlers.capture() is None
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        assert handlers.capture() == {"SIGUSR2": signal.SIG_IGN}
        handlers.restore({"SIGUSR1": signal.SIG_IGN, "SIGNOTHERE": signal.SIG_IGN})
        assert signal.getsignal(signal.SIGUSR1) is not signal.SIG_IGN
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_interpreter_settings_are_carried_only_when_changed() -> None:
    """The integer-string digit limit, the switch interval and the collector's settings: what the
    program changed comes back in a process whose defaults are the baseline's."""
    import gc

    from portal.capture.extensions.settings import specs

    by_name = {spec.name: spec for spec in specs()}
    names = ("int_max_str_digits", "switch_interval", "gc_settings")
    assert all(by_name[n].capture() is None for n in names)  # nothing changed yet
    before = (sys.get_int_max_str_digits(), sys.getswitchinterval(), gc.get_threshold())
    try:
        sys.set_int_max_str_digits(10_000)
        sys.setswitchinterval(0.001)
        gc.set_threshold(5000, 20, 20)
        gc.disable()
        carried = {n: by_name[n].capture() for n in names}
        assert carried["gc_settings"] == (False, (5000, 20, 20))
        sys.set_int_max_str_digits(before[0])
        sys.setswitchinterval(before[1])
        gc.set_threshold(*before[2])
        gc.enable()
        for n in names:
            by_name[n].restore(carried[n])
        assert sys.get_int_max_str_digits() == 10_000
        assert sys.getswitchinterval() == pytest.approx(0.001)
        assert gc.get_threshold() == (5000, 20, 20) and not gc.isenabled()
    finally:
        sys.set_int_max_str_digits(before[0])
        sys.setswitchinterval(before[1])
        gc.set_threshold(*before[2])
        gc.enable()


def test_numpy_error_handling_is_carried() -> None:
    np = pytest.importorskip("numpy")
    from portal.capture.extensions.settings import NumpyErrorHandling

    handling = NumpyErrorHandling()
    with np.errstate(all="raise", under="ignore"):
        carried = handling.capture()
    assert carried["divide"] == "raise" and carried["under"] == "ignore"
    with np.errstate():
        handling.restore(carried)
        with pytest.raises(FloatingPointError):
            np.array([1.0]) / np.array([0.0])
