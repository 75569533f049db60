"""What a checkpoint cannot carry defers the pause (and is recorded); positions that cannot be
carried defer it until the program is back on a safe chain. Real processes throughout."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _harness import EXIT_PAUSED, connect, plain_run, runtime, short_dir

from portal.capture.image import Header, read_image


def _pause_and_resume(script: Path, *args: str) -> tuple[Header, bytes, bytes]:
    """Run ``script`` (it pauses itself under Portal), resume it; return the checkpoint header
    and the combined stdout and stderr."""
    ckpt = script.with_suffix(".portal")
    first = subprocess.run(
        runtime("run", "--checkpoint", str(ckpt), str(script), *args),
        capture_output=True,
        cwd=script.parent,
        timeout=60,
        check=False,
    )
    assert first.returncode == EXIT_PAUSED, first.stderr.decode()
    header = read_image(ckpt).header
    second = subprocess.run(
        runtime("resume", str(ckpt)),
        capture_output=True,
        cwd=script.parent,
        timeout=60,
        check=False,
    )
    return header, first.stdout + second.stdout, first.stderr + second.stderr


def _line_of(script: Path, text: str) -> int:
    lines = script.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _assert_same_as_plain(script: Path, out: bytes, err: bytes) -> None:
    plain = plain_run(script)
    assert out == plain.stdout
    assert err == plain.stderr


@pytest.mark.parametrize(
    ("name", "value", "type_name", "reason", "released_at"),
    [
        (
            "held_file.py",  # a file outside the working directory (one inside travels)
            "fh",
            "_io.TextIOWrapper",
            "TypeError: open file outside the job's working directory: ",
            'print("released")',
        ),
        (
            "held_socket.py",
            "self.conn",
            "socket.socket",
            "TypeError: cannot pickle 'socket' object",
            'print("closed")',
        ),
        (
            "held_foreign_generator.py",
            "walker",
            "generator",
            "TypeError: cannot pickle 'generator' object: numbers of ? runs with globals that are no module's namespace",
            'print("released")',
        ),
        (
            "held_thread.py",
            "state['worker']",
            "threading.Thread",
            "TypeError: cannot pickle 'Thread' object",
            'print("joined")',
        ),
    ],
)
def test_held_resource_defers_the_pause_and_is_recorded(
    scripts: Path, name: str, value: str, type_name: str, reason: str, released_at: str
) -> None:
    script = scripts / name
    header, out, err = _pause_and_resume(script)
    problems = [(p.name, p.type_name, p.reason, p.kind) for p in header.problems]
    assert any(
        p[0] == value and p[1] == type_name and p[2].startswith(reason) and p[3] == "value"
        for p in problems
    ), problems
    found = next(p for p in header.problems if p.name == value)
    assert found.where.startswith(f"{name}:")
    # The pause came only once the resource was let go.
    paused_line = int(header.paused_at.split(":")[1].split()[0])
    assert paused_line >= _line_of(script, released_at), header.paused_at
    _assert_same_as_plain(script, out, err)


@pytest.mark.parametrize(
    ("name", "type_name", "continues_at"),
    [
        ("in_handler.py", "exception handler", 'print("handled")'),
        # The generator itself travels: the pause is taken once back in the loop's body.
        ("in_generator.py", "generator", "total += value"),
        ("in_callback.py", "call through C", 'print("sorted"'),
    ],
)
def test_unsafe_position_defers_until_back_on_a_safe_chain(
    scripts: Path, name: str, type_name: str, continues_at: str
) -> None:
    script = scripts / name
    header, out, err = _pause_and_resume(script)
    kinds = {(p.kind, p.type_name) for p in header.problems}
    assert ("position", type_name) in kinds, header.problems
    paused_line = int(header.paused_at.split(":")[1].split()[0])
    assert paused_line >= _line_of(script, continues_at), header.paused_at
    _assert_same_as_plain(script, out, err)


def test_a_running_generator_is_named_as_a_position(scripts: Path) -> None:
    header, _, _ = _pause_and_resume(scripts / "in_generator.py")
    assert any(
        p.type_name == "generator" and p.kind == "position" and "partway" in p.reason
        for p in header.problems
    ), header.problems


def test_script_releases_a_child_process_when_a_pause_is_pending(scripts: Path) -> None:
    script = scripts / "child_process.py"
    work = short_dir()
    sock, ckpt = f"{work}/c.sock", f"{work}/ck.portal"
    proc = subprocess.Popen(
        runtime("run", "--checkpoint", ckpt, "--control", sock, str(script)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=scripts,
    )
    control = connect(proc, sock)
    assert control is not None and proc.stdout is not None
    assert proc.stdout.readline() == b"started child\n"
    control.pause(within=20)
    events = control.events_until({"paused", "abandoned", "failed"})
    control.close()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PAUSED, (events, err.decode())
    assert events[-1]["event"] == "paused"
    assert b"stopped child for the pause" in out
    resumed = subprocess.run(
        runtime("resume", ckpt), capture_output=True, cwd=scripts, timeout=60, check=False
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert resumed.stdout == b"continuing\nend\n"


def test_node_pause_is_deferred_then_abandoned_at_its_deadline(scripts: Path) -> None:
    script = scripts / "holds_forever.py"
    work = short_dir()
    sock, ckpt = f"{work}/c.sock", f"{work}/ck.portal"
    proc = subprocess.Popen(
        runtime("run", "--checkpoint", ckpt, "--control", sock, str(script), "80"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=scripts,
    )
    control = connect(proc, sock)
    assert control is not None and control.hello["pending"] is False
    assert proc.stdout is not None and proc.stdout.readline() == b"holding\n"
    control.pause(within=0.3)
    events = control.events_until({"abandoned", "paused"})
    control.close()
    out, err = proc.communicate(timeout=60)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "pending" and "deferred" in kinds and kinds[-1] == "abandoned", events
    assert events[-1]["reason"] == "deadline"
    deferred = next(e for e in events if e["event"] == "deferred")
    assert {"name": "fh", "type_name": "_io.TextIOWrapper"}.items() <= deferred["problems"][
        0
    ].items()
    assert proc.returncode == 0, err.decode()
    assert out == b"line events off: True\nend\n"  # after "holding", read above
    assert not Path(ckpt).exists()


def _pause_slow_state(scripts: Path, *args: str) -> tuple[list[dict[str, Any]], bytes, str]:
    """``slow_to_save.py`` (a state that takes 1.5 s to walk) given a pause of 0.3 s: its
    events, its output, and its checkpoint's path."""
    work = short_dir()
    sock, ckpt = f"{work}/c.sock", f"{work}/ck.portal"
    proc = subprocess.Popen(
        runtime("run", "--checkpoint", ckpt, "--control", sock, "slow_to_save.py", "1.5", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=scripts,
    )
    control = connect(proc, sock)
    assert control is not None
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    control.pause(within=0.3)
    events = control.events_until({"abandoned", "paused", "failed"})
    control.close()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, EXIT_PAUSED), err.decode()
    return events, out, ckpt


def test_a_pause_whose_safe_point_came_in_time_is_taken_though_its_walk_outlasts_the_deadline(
    scripts: Path,
) -> None:
    """The pause's deadline is when the program must reach a safe point (the node keeps the
    rest of the notice for the saving). Reached in time, the pause is not abandoned halfway
    through a walk that outlasts it: that kept nothing, where finishing saves the work."""
    events, _, ckpt = _pause_slow_state(scripts)
    assert [e["event"] for e in events] == ["pending", "paused"], events
    paused = events[-1]
    assert paused["seconds_to_safe_point"] < 0.3 <= 1.5 <= paused["seconds_to_write"], paused
    resumed = subprocess.run(
        runtime("resume", ckpt), capture_output=True, cwd=scripts, timeout=60, check=False
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert resumed.stdout == b"end 44850 1.5\n"


def test_a_walk_past_the_deadline_that_finds_a_value_it_cannot_carry_abandons_the_pause(
    scripts: Path,
) -> None:
    """The same walk, finding an open file that cannot travel: no checkpoint, and no time left
    to try again, so the pause is abandoned as the walk ends (not at some later line) and the
    program runs on to its end."""
    events, out, ckpt = _pause_slow_state(scripts, "hold")
    kinds = [e["event"] for e in events]
    assert kinds[0] == "pending" and kinds[-1] == "abandoned", events
    assert events[-1]["reason"] == "deadline"
    assert any(p["name"] == "fh" for p in events[-1]["problems"]), events[-1]
    assert out == b"end 44850 1.5\n"  # after "ready", read above
    assert not Path(ckpt).exists()


def test_node_can_cancel_a_pending_pause(scripts: Path) -> None:
    script = scripts / "holds_forever.py"
    work = short_dir()
    sock, ckpt = f"{work}/c.sock", f"{work}/ck.portal"
    proc = subprocess.Popen(
        runtime("run", "--checkpoint", ckpt, "--control", sock, str(script), "60"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=scripts,
    )
    control = connect(proc, sock)
    assert control is not None
    assert proc.stdout is not None and proc.stdout.readline() == b"holding\n"
    control.pause(within=60)
    control.events_until({"deferred"})
    control.cancel()
    events = control.events_until({"abandoned"})
    control.close()
    out, err = proc.communicate(timeout=60)
    assert events[-1]["reason"] == "cancelled"
    assert proc.returncode == 0, err.decode()
    assert out == b"line events off: True\nend\n"  # after "holding", read above


def test_probe_names_values_as_the_script_knows_them(scripts: Path) -> None:
    import json

    for cmd in (
        runtime("run", str(scripts / "probe_me.py")),
        [sys.executable, str(scripts / "probe_me.py")],
    ):
        done = subprocess.run(cmd, capture_output=True, cwd=scripts, timeout=60, check=False)
        assert done.returncode == 0, done.stderr.decode()
        first, second = done.stdout.decode().splitlines()
        problems = json.loads(first)
        line = _line_of(scripts / "probe_me.py", "problems = probe()")
        assert [
            "digest",
            "_hashlib.HASH",
            "TypeError: cannot pickle '_hashlib.HASH' object",
            f"probe_me.py:{line} in check",
        ] in problems
        assert any(p[0] == "fh" and p[1] == "_io.TextIOWrapper" for p in problems)
        assert any(p[0] == "state['fh']" for p in problems) or any(p[0] == "fh" for p in problems)
        assert json.loads(second) == []
        assert not list(scripts.glob("*.portal"))


def test_probe_names_each_lock_once_whatever_reaches_it(scripts: Path) -> None:
    """A ``threading.Event`` (another thread waits on it) is one problem named as the script
    knows it (the waiting thread named), not its condition's lock and each of the lock's bound
    methods; a held lock reached
    again through a bound method is not named twice. (Unlocked ones travel.)"""
    import json

    done = subprocess.run(
        runtime("run", str(scripts / "probe_sync.py")),
        capture_output=True,
        cwd=scripts,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    problems = json.loads(done.stdout)
    assert [p[0] for p in problems] == ["cond", "ready", "worker.lock"]
    assert [p[1] for p in problems] == ["threading.Condition", "threading.Event", "_thread.lock"]
    held = "TypeError: cannot pickle '_thread.lock' object: it is a lock held at the pause"
    assert problems[2][2].startswith(held)
    assert problems[0][2].startswith(held.replace("_thread.lock", "_thread.RLock"))
    # The event's waiter is a thread nothing makes again: named, with the way out.
    assert "thread 'Thread-1 (wait)' waits on it" in problems[1][2], problems[1][2]
    assert "portal.runtime.remake" in problems[1][2]


def test_wake_signals_landing_in_the_runtimes_own_code_are_no_obstacle(scripts: Path) -> None:
    """The runtime's wake signal may land while the main thread runs the runtime's own line
    callback (a pending pause listens to every line): that frame is Portal's, not the script's,
    and must never be reported as library code the pause waits on."""
    work = short_dir()
    sock, ckpt = f"{work}/c.sock", f"{work}/ck.portal"
    proc = subprocess.Popen(
        runtime(
            "run", "--checkpoint", ckpt, "--control", sock, str(scripts / "holds_busy.py"), "3"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=scripts,
    )
    control = connect(proc, sock)
    assert control is not None and proc.stdout is not None
    assert proc.stdout.readline() == b"holding\n"
    control.pause(within=2.0)
    control.events_until({"deferred"})
    for i in range(400):  # the wake and the control channel's signals, while each line calls back
        proc.send_signal(signal.SIGUSR1 if i % 2 else signal.SIGIO)
        time.sleep(0.002)
    events = control.events_until({"abandoned", "paused"})
    control.close()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert out == b"end\n"
    named = {p["name"] for e in events for p in e.get("problems", [])}
    assert named == {"fh"}, events
