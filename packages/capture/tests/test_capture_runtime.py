"""``python -m portal.runtime``: the script's environment, exit codes, re-pausing resumed frames,
and refusals, in real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from _harness import EXIT_PAUSED, EXIT_REFUSED, plain_run, runtime, short_dir

from portal.capture.image import CheckpointImage, read_image, write_image
from portal.runtime import rt


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(cmd, capture_output=True, cwd=cwd, timeout=60, check=False)


def _run_to_end(script: Path, *args: str) -> tuple[list[int], bytes, bytes, Path]:
    """Run under Portal, resuming after every pause; return exit codes and combined output."""
    ckpt = script.with_suffix(".portal")
    done = _run(runtime("run", "--checkpoint", str(ckpt), str(script), *args), script.parent)
    codes, out, err = [done.returncode], done.stdout, done.stderr
    while codes[-1] == EXIT_PAUSED and len(codes) < 10:
        done = _run(runtime("resume", str(ckpt)), script.parent)
        codes.append(done.returncode)
        out += done.stdout
        err += done.stderr
    return codes, out, err, ckpt


def test_second_pause_lands_inside_resumed_frames(scripts: Path) -> None:
    codes, out, err, _ = _run_to_end(scripts / "repause.py")
    assert codes == [EXIT_PAUSED] * 3 + [0], err.decode()
    plain = plain_run(scripts / "repause.py")
    assert out == plain.stdout
    assert err == plain.stderr == b""


def test_exceptions_and_environment_look_like_plain_python(scripts: Path) -> None:
    script = scripts / "raises_after_pause.py"
    codes, out, err, _ = _run_to_end(script, "--flag", "x")
    plain = plain_run(script, "--flag", "x")
    assert codes == [EXIT_PAUSED, 1]
    assert plain.returncode == 1
    assert out == plain.stdout
    assert b"argv ['--flag', 'x'] __main__ raises_after_pause.py scripts" in out
    assert err == plain.stderr  # the traceback through resumed frames is python's, line for line
    assert b"KeyError: 'missing'" in err


@pytest.mark.parametrize("status", ["0", "3"])
def test_sys_exit_status_propagates_across_a_pause(scripts: Path, status: str) -> None:
    codes, out, _, _ = _run_to_end(scripts / "exits.py", status)
    assert codes == [EXIT_PAUSED, int(status)]
    assert out == plain_run(scripts / "exits.py", status).stdout


def test_uncaught_exception_without_pause(tmp_path: Path) -> None:
    script = tmp_path / "boom.py"
    script.write_text("def f():\n    raise ValueError('boom')\n\nprint('hi')\nf()\n")
    ours = _run(runtime("run", str(script)), tmp_path)
    plain = plain_run(script)
    assert (ours.returncode, ours.stdout, ours.stderr) == (1, plain.stdout, plain.stderr)


def test_syntax_error_is_reported_like_python(tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text("x = (\n")
    ours = _run(runtime("run", str(script)), tmp_path)
    assert ours.returncode == 1
    assert b"SyntaxError" in ours.stderr


def test_big_array_travels_out_of_band_and_stays_writable(scripts: Path) -> None:
    pytest.importorskip("numpy")
    script = scripts / "big_array.py"
    codes, out, err, ckpt = _run_to_end(script)
    assert codes == [EXIT_PAUSED, 0], err.decode()
    assert out == plain_run(script).stdout
    assert b"True" in out  # writeable
    # (the checkpoint was overwritten by nothing: the resumed run did not pause again)
    image = read_image(ckpt)
    assert 16_000_000 in image.header.buffer_lengths
    assert len(image.pickle) < 1_000_000


def _paused_checkpoint(scripts: Path) -> Path:
    ckpt = scripts / "exits.portal"
    done = _run(runtime("run", "--checkpoint", str(ckpt), str(scripts / "exits.py"), "0"), scripts)
    assert done.returncode == EXIT_PAUSED
    return ckpt


def _rewrite(path: Path, **header_changes: object) -> None:
    image = read_image(path)
    header = msgspec.structs.replace(image.header, **header_changes)
    write_image(CheckpointImage(header=header, pickle=image.pickle, buffers=image.buffers), path)


def test_resume_refuses_another_python_minor(scripts: Path) -> None:
    ckpt = _paused_checkpoint(scripts)
    interp = read_image(ckpt).header.interpreter
    _rewrite(ckpt, interpreter=msgspec.structs.replace(interp, version="3.10.9", minor="3.10"))
    done = _run(runtime("resume", str(ckpt)), scripts)
    assert done.returncode == EXIT_REFUSED
    assert b"[CAPTURE_PYTHON_VERSION_MISMATCH]" in done.stderr
    assert b"resumes only on Python 3.10" in done.stderr
    assert done.stdout == b""


def test_resume_refuses_a_newer_format(scripts: Path) -> None:
    ckpt = _paused_checkpoint(scripts)
    _rewrite(ckpt, format_version=99)
    done = _run(runtime("resume", str(ckpt)), scripts)
    assert done.returncode == EXIT_REFUSED
    assert b"[CAPTURE_FORMAT_TOO_NEW]" in done.stderr


def test_resume_refuses_a_corrupt_file(scripts: Path) -> None:
    ckpt = _paused_checkpoint(scripts)
    data = bytearray(ckpt.read_bytes())
    data[len(data) // 2] ^= 0xFF
    ckpt.write_bytes(bytes(data))
    done = _run(runtime("resume", str(ckpt)), scripts)
    assert done.returncode == EXIT_REFUSED
    assert b"[CAPTURE_CHECKPOINT_CORRUPT]" in done.stderr
    missing = _run(runtime("resume", str(scripts / "nope.portal")), scripts)
    assert missing.returncode == EXIT_REFUSED
    assert b"[CAPTURE_CHECKPOINT_UNREADABLE]" in missing.stderr


def test_resume_writes_the_next_checkpoint_where_asked(scripts: Path) -> None:
    first = scripts / "first.portal"
    second = scripts / "second.portal"
    script = scripts / "repause.py"
    assert (
        _run(runtime("run", "--checkpoint", str(first), str(script)), scripts).returncode
        == EXIT_PAUSED
    )
    done = _run(runtime("resume", "--checkpoint", str(second), str(first)), scripts)
    assert done.returncode == EXIT_PAUSED
    assert read_image(second).pickle != read_image(first).pickle  # a later state


def test_rt_outside_portal_is_inert() -> None:
    assert rt.active is False
    assert rt.pending() is False
    import pickle

    assert pickle.loads(pickle.dumps(rt)) is rt


def test_usage_error() -> None:
    done = subprocess.run(runtime("frobnicate"), capture_output=True, timeout=60, check=False)
    assert done.returncode == 2
    assert sys.executable  # the runtime is importable from this interpreter


def test_plugin_reducer_and_capture_extension(scripts: Path) -> None:
    """A reducer registered by type name carries a value pickle refuses; an extension's state
    (kept outside the program's globals) is captured at the pause and restored at resume."""
    import os

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent / "corpus" / "plugin"))
    env.pop("PORTAL_DISABLE_PLUGIN_AUTOLOAD", None)
    script = scripts / "uses_plugin.py"
    ckpt = scripts / "plug.portal"
    first = subprocess.run(
        runtime("run", "--checkpoint", str(ckpt), str(script)),
        capture_output=True,
        cwd=scripts,
        env=env,
        timeout=60,
        check=False,
    )
    assert first.returncode == EXIT_PAUSED, first.stderr.decode()
    second = subprocess.run(
        runtime("resume", str(ckpt)),
        capture_output=True,
        cwd=scripts,
        env=env,
        timeout=60,
        check=False,
    )
    assert second.returncode == 0, second.stderr.decode()
    assert second.stdout == b"db lock 5\n"


def test_control_channel_answers_a_bad_line(scripts: Path) -> None:
    from _harness import connect

    work = short_dir()
    proc = subprocess.Popen(
        runtime(
            "run",
            "--control",
            f"{work}/c.sock",
            "--checkpoint",
            f"{work}/x",
            str(scripts / "holds_forever.py"),
            "30",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=scripts,
    )
    control = connect(proc, f"{work}/c.sock")
    assert control is not None
    control.sock.sendall(b"not json\n")
    event = control.next_event()
    control.close()
    proc.communicate(timeout=60)
    assert event["event"] == "error" and "cannot understand" in event["message"]
    assert proc.returncode == 0


def test_unusable_control_socket_is_refused_clearly(scripts: Path) -> None:
    done = _run(
        runtime("run", "--control", "/nonexistent/dir/c.sock", str(scripts / "exits.py"), "0"),
        scripts,
    )
    assert done.returncode == EXIT_REFUSED
    assert b"[INVALID_ARGUMENT]" in done.stderr and b"/nonexistent/dir/c.sock" in done.stderr
    assert done.stdout == b""


def test_object_kinds_survive_a_pause(scripts: Path) -> None:
    """Enums, frozen dataclasses, named tuples, __slots__ with inheritance, class/static methods,
    properties, defaultdict with a lambda factory, lru_cache-decorated functions."""
    codes, out, err, _ = _run_to_end(scripts / "object_kinds.py")
    assert codes == [EXIT_PAUSED, 0], err.decode()
    plain = plain_run(scripts / "object_kinds.py")
    assert (out, err) == (plain.stdout, plain.stderr)


def test_the_control_channel_can_be_read_while_its_own_thread_holds_its_lock(
    tmp_path: Path,
) -> None:
    """SIGIO runs ``drain`` on the main thread, which may be inside ``send`` holding the
    channel's lock (a periodic checkpoint's report as a pause arrives): reading must not wait for
    that lock for ever. Likewise the engine's requests, made from the same handler."""
    import threading

    from portal.runtime.control import ControlChannel

    class Requests:
        def note_obstacle(self, frame: object) -> None:
            pass

        def stop_probe_if_due(self, frame: object = None) -> None:
            pass

    channel = ControlChannel(os.path.join(short_dir(), "c.sock"))
    channel._engine = Requests()  # type: ignore[assignment]

    def interrupted_inside_send() -> None:
        with channel._lock:  # where send() holds it
            channel._on_sigio(0, None)  # the handler runs on this same thread

    worker = threading.Thread(target=interrupted_inside_send, daemon=True)
    worker.start()
    worker.join(timeout=10)
    try:
        assert not worker.is_alive(), "the SIGIO handler waited for a lock its thread holds"
    finally:
        channel.close()
        for sock in (channel._server, channel._wake_r, channel._wake_w):  # never served
            sock.close()


def test_a_state_that_fails_to_load_is_told_and_the_checkpoint_kept(tmp_path: Path) -> None:
    """Code that runs while the state loads (an object's own ``__setstate__``) raises: the
    resume says what failed, where, and the way out, with no traceback; the checkpoint is as it
    was, so a resume where that code works continues the program."""
    (tmp_path / "fragile.py").write_text(
        "import os\n\n\n"
        "class Fragile:\n"
        "    def __init__(self, value):\n"
        "        self.value = value\n\n"
        "    def __setstate__(self, state):\n"
        "        if os.environ.get('FRAGILE_BREAK') == '1':\n"
        "            raise LookupError('no such table: ' + str(state['value']))\n"
        "        self.__dict__.update(state)\n"
    )
    script = tmp_path / "main.py"
    script.write_text(
        "import os\nimport signal\n\nimport fragile\nfrom portal.runtime import rt\n\n"
        "held = fragile.Fragile(41)\n"
        "if rt.active:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "print('value', held.value + 1)\n"
    )
    ckpt = tmp_path / "main.portal"
    first = _run(runtime("run", "--checkpoint", str(ckpt), str(script)), tmp_path)
    assert first.returncode == EXIT_PAUSED, first.stderr.decode()
    before = ckpt.read_bytes()
    broken = subprocess.run(
        runtime("resume", str(ckpt)),
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
        env={**os.environ, "FRAGILE_BREAK": "1"},
    )
    assert broken.returncode == EXIT_REFUSED
    message = broken.stderr.decode()
    assert "[CAPTURE_RESTORE_FAILED]" in message
    assert "rebuilding the program's state failed in __setstate__ (fragile.py:10)" in message
    assert "LookupError: no such table: 41" in message
    assert "The checkpoint is unchanged" in message
    assert "Traceback" not in message
    assert broken.stdout == b""
    assert ckpt.read_bytes() == before
    resumed = _run(runtime("resume", str(ckpt)), tmp_path)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert resumed.stdout == b"value 42\n"
