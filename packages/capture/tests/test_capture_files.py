"""File objects in a checkpoint (``capture_files``): closed files travel closed; open regular
files of the job's working directory come back open on the same path, mode and position (text
ones reading on the same line, a ``w`` file not truncated again), one object where the program
had one; every other open file is refused, named. End to end: scripts that keep files around as
real scripts do, paused with SIGTERM at random moments and resumed (in the same directory and in
a fresh one, as on a new machine), print and leave exactly what an uninterrupted run does."""

# ruff: noqa: SIM115 (files held open outside a with block are what these tests are about)

from __future__ import annotations

import contextlib
import io
import os
import pickle
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _harness import CORPUS, EXIT_PAUSED, connect, runtime, short_dir

from portal.capture import restoring
from portal.capture.extensions import files, workdir
from portal.capture.pickler import dumps, resolve_reducers

SCRIPTS = CORPUS / "files"
TEXT = "".join(
    f"ligne {i} café {'é' * (i % 5)}{chr(13) if i % 4 == 0 else ''}\n" for i in range(2000)
)


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A job's working directory, current and set as the runtime would set it."""
    root = tmp_path / "job"
    root.mkdir()
    monkeypatch.chdir(root)
    monkeypatch.setattr(workdir, "_ROOT", [str(root)])
    monkeypatch.setattr(workdir, "_MOVED", [])
    yield root


def _dumps(obj: object) -> tuple[bytes, list[memoryview]]:
    reducers = resolve_reducers(
        {name: r for spec in files.serializer_specs() for name, r in spec.reducers.items()}
    )
    data, buffers, _ = dumps(obj, namespaces={}, reducers=reducers)
    return data, buffers


def _round_trip(obj: Any) -> Any:
    data, buffers = _dumps(obj)
    return pickle.loads(data, buffers=buffers)


def _refusal(obj: object) -> str:
    with pytest.raises(TypeError) as caught:
        _dumps(obj)
    return str(caught.value)


# -- closed files ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "buffering", "cls"),
    [
        ("r", -1, io.TextIOWrapper),
        ("w", -1, io.TextIOWrapper),
        ("a+", -1, io.TextIOWrapper),
        ("rb", -1, io.BufferedReader),
        ("wb", -1, io.BufferedWriter),
        ("r+b", -1, io.BufferedRandom),
        ("ab", 0, io.FileIO),
        ("xb", 0, io.FileIO),
    ],
)
def test_a_closed_file_travels_closed_with_its_name_and_mode(
    job: Path, mode: str, buffering: int, cls: Any
) -> None:
    if "r" in mode:
        (job / "data.txt").write_text("some text\n")
    kwargs: dict[str, Any] = {"encoding": "latin-1", "newline": ""} if "b" not in mode else {}
    with open("data.txt", mode, buffering=buffering, **kwargs) as f:
        pass
    back = _round_trip(f)
    assert type(back) is cls and back.closed
    assert back.name == f.name == "data.txt"
    assert back.mode == f.mode
    if cls is io.TextIOWrapper:
        assert (back.encoding, back.errors, back.line_buffering) == ("latin-1", "strict", False)
        assert files._newline(files._text_view(back)) == ""
    for use in (back.read, back.fileno, lambda: back.write(b"x" if "b" in mode else "x")):
        with pytest.raises(ValueError):
            use()


@pytest.mark.parametrize("cls", [io.BytesIO, io.StringIO])
def test_a_closed_memory_file_travels_closed_and_an_open_one_by_value(job: Path, cls: Any) -> None:
    closed = cls()
    closed.close()
    back = _round_trip(closed)
    assert type(back) is cls and back.closed
    data = b"abcdef" if cls is io.BytesIO else "abcdef"
    kept = cls(data)
    kept.read(2)
    again = _round_trip(kept)
    assert again.read() == data[2:]


def test_a_closed_file_needs_no_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workdir, "_ROOT", [])
    with open(tmp_path / "x.bin", "wb") as f:
        f.write(b"x")
    back = _round_trip({"f": f, "again": f})
    assert back["f"] is back["again"] and back["f"].closed and back["f"].name == f.name


# -- open files of the working directory ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["r", "r+", "a", "a+", "w", "w+", "rb", "r+b", "ab", "wb", "x"])
def test_an_open_file_comes_back_at_its_position_in_its_mode(job: Path, mode: str) -> None:
    binary = "b" in mode
    if mode != "x":
        (job / "f.dat").write_bytes(TEXT.encode())
    f = open("f.dat", mode)
    if "r" in mode:
        f.read(100)
        f.readline()
    if mode[0] != "r" or "+" in mode:
        f.write(b"written\n" if binary else "écrit\n")  # still in the buffer
    position = f.tell()
    back = _round_trip(f)
    assert back is not f and type(back) is type(f)
    assert (back.name, back.mode, back.closed, back.tell()) == (f.name, f.mode, False, position)
    assert back.readable() == f.readable() and back.writable() == f.writable()
    on_disk = (job / "f.dat").read_bytes()
    assert len(on_disk) >= (len(TEXT.encode()) if mode[0] in "ra" else position)  # not truncated
    if f.readable():
        assert back.read() == f.read()
    if f.writable():
        f.close()
        back.write(b"more\n" if binary else "encore\n")
        back.close()
        assert (job / "f.dat").read_bytes().endswith(b"more\n" if binary else b"encore\n")
    f.close()
    back.close()


@pytest.mark.parametrize("newline", [None, "", "\n", "\r\n"])
@pytest.mark.parametrize("stop", [0, 1, 7, 300, 498])
def test_a_text_file_read_in_a_for_loop_goes_on_with_the_same_line(
    job: Path, newline: str | None, stop: int
) -> None:
    (job / "t.txt").write_bytes(TEXT.encode())
    f = open("t.txt", encoding="utf-8", newline=newline)
    for i, _line in enumerate(f):
        if i == stop:
            break
    back = _round_trip(f)
    with f, back:
        rest = list(f)
        assert list(back) == rest and rest  # the line after the one the loop stopped at, on
        assert back.tell() == f.tell()  # tell() works again once the loop is over, on both


def test_a_for_loop_over_a_file_with_a_pending_cr_goes_on(job: Path) -> None:
    # A chunk ending in "\r" leaves the decoder waiting for a possible "\n".
    f = open("t.txt", "w", newline="")
    f.write("a" * 8191 + "\r\nnext\n" + "b\rc\n" * 5)
    f.close()
    f = open("t.txt")
    assert next(f) == "a" * 8191 + "\n"
    back = _round_trip(f)
    with f, back:
        assert list(back) == list(f) == ["next\n"] + ["b\n", "c\n"] * 5


def test_line_buffering_write_through_and_buffer_size_come_back(job: Path) -> None:
    f = open("log.txt", "a", buffering=1, encoding="utf-16", errors="replace")
    f.write("first\n")
    f.reconfigure(write_through=True)
    raw = open("raw.bin", "wb", buffering=1234)
    back, back_raw = _round_trip((f, raw))
    assert (back.line_buffering, back.write_through, back.encoding, back.errors) == (
        True,
        True,
        "utf-16",
        "replace",
    )
    assert files._buffer_size(back_raw) == 1234
    f.close()
    back.write("second\n")  # no second BOM: it goes on where the file was
    back.close()
    assert (job / "log.txt").read_text(encoding="utf-16") == "first\nsecond\n"
    raw.close()
    back_raw.close()


def test_one_file_referenced_twice_is_one_object_and_its_layers_stay_its_own(job: Path) -> None:
    log: Any = open("train.log", "a")
    log.write("step 0\n")
    holder = {"log": log, "again": [log], "buffer": log.buffer, "raw": log.buffer.raw}
    back = _round_trip(holder)
    assert back["log"] is back["again"][0]
    assert back["buffer"] is back["log"].buffer and back["raw"] is back["log"].buffer.raw
    back["log"].write("step 1\n")
    back["log"].close()
    assert back["raw"].closed
    log.close()
    assert (job / "train.log").read_text() == "step 0\nstep 1\n"


def test_the_buffered_contents_are_on_disk_before_the_directory_is_read(job: Path) -> None:
    log = open("train.log", "w")
    log.write("x" * 100)
    out = open("out.bin", "ab")
    out.write(b"y" * 100)
    assert (job / "train.log").read_bytes() == b"" and (job / "out.bin").read_bytes() == b""
    state = workdir.WorkdirState().capture()
    assert state is not None
    carried = {e.path: bytes(memoryview(e.data)) for e in state.entries if e.kind == "f"}
    assert carried == {"train.log": b"x" * 100, "out.bin": b"y" * 100}
    log.close()
    out.close()


def test_at_resume_the_file_is_opened_after_the_extensions_restore(
    job: Path, tmp_path: Path
) -> None:
    """The pickle loads before the working directory's files are back: the file is a
    placeholder until then (``enumerate(f)`` on a frame's stack can still be rebuilt), then
    opened on the path mapped into the new directory, at its position."""
    (job / "t.txt").write_text(TEXT)
    f = open("t.txt")
    loop = enumerate(f)
    for _ in range(3):
        next(loop)
    log = open(job / "abs.log", "a")  # an absolute name: the new directory's path after
    log.write("before\n")
    data, buffers = _dumps((loop, log))
    new = tmp_path / "new"
    new.mkdir()
    with restoring.deferring() as deferred:
        back, back_log = pickle.loads(data, buffers=buffers)  # nothing in "new" yet
    assert deferred and not (new / "t.txt").exists()
    for name in ("t.txt", "abs.log"):  # what the workdir_files restore does
        shutil.copy(job / name, new / name)
    workdir._MOVED[:] = [(str(job), str(new))]
    for rebuild in deferred:
        rebuild()
    inner = back.__reduce__()[1][0]
    with f, inner, log, back_log:
        assert list(back) == list(loop)
        assert inner.name == "t.txt"
        assert os.path.samefile(f"/proc/self/fd/{inner.fileno()}", new / "t.txt")
        assert back_log.name == str(new / "abs.log")
        back_log.write("after\n")
    assert (new / "abs.log").read_text() == "before\nafter\n"
    assert (job / "abs.log").read_text() == "before\n"


def test_a_file_missing_at_resume_stops_the_resume_naming_it(job: Path) -> None:
    f = open("gone.txt", "w")
    data, buffers = _dumps(f)
    os.unlink("gone.txt")
    with pytest.raises(files.FileNotReopenedError) as caught:
        pickle.loads(data, buffers=buffers)
    assert caught.value.code == "CAPTURE_FILE_NOT_REOPENED"
    assert str(job / "gone.txt") in str(caught.value)
    f.close()


# -- what stays on the cannot-carry list ----------------------------------------------------------


def test_an_open_file_outside_the_working_directory_is_refused_with_its_name(
    job: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("x")
    with open(outside) as f:
        assert _refusal(f) == (
            f"open file outside the job's working directory: {outside} (close it before the "
            "pause, or keep it under the working directory)"
        )
    link = job / "link.txt"
    link.symlink_to(outside)  # inside by its name, outside by where it leads
    with open(link) as f:
        assert "outside the job's working directory" in _refusal(f)


def test_an_open_file_the_checkpoint_leaves_out_is_refused(job: Path) -> None:
    (job / ".portalignore").write_text("cache/\n")
    (job / "cache").mkdir()
    with open("cache/seen.txt", "w") as f:
        assert "leaves out: " + str(job / "cache" / "seen.txt") in _refusal(f)
    (job / "venv").mkdir()
    (job / "venv" / "pyvenv.cfg").write_text("")
    with open("venv/lib.txt", "w") as f:
        assert "leaves out" in _refusal(f)
    with open("ck.portal", "wb") as f:
        assert "leaves out" in _refusal(f)


def test_pipes_devices_sockets_descriptors_and_deleted_files_are_refused(job: Path) -> None:
    read_end, write_end = os.pipe()
    with open(read_end, "rb") as pipe, open(write_end, "wb") as other:
        assert "file descriptor" in _refusal(pipe) and "file descriptor" in _refusal(other)
    os.mkfifo("fifo")
    fd = os.open("fifo", os.O_RDWR)
    with open(f"/proc/self/fd/{fd}", "rb", buffering=0) as fifo:
        assert _refusal(fifo).startswith("open pipe ")
    os.close(fd)
    with open(os.devnull, "w") as null:
        assert _refusal(null).startswith(f"open device {os.devnull}:")
    left, right = socket.socketpair()
    with left, right, left.makefile("rb") as stream:
        assert "socket.SocketIO" in _refusal(stream)
    with open("doomed.txt", "w") as doomed:
        os.unlink("doomed.txt")
        assert _refusal(doomed).startswith("open file deleted or moved while open")
    pair = io.BufferedRWPair(io.BytesIO(), io.BytesIO())
    assert _refusal(pair).startswith("a BufferedRWPair")
    text = open("plain.txt", "w")
    text.detach().close()
    assert _refusal(text).startswith("a detached TextIOWrapper")


def test_outside_the_runtime_no_open_file_travels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(workdir, "_ROOT", [])
    with open("x.txt", "w") as f:
        assert "no working directory travels" in _refusal(f)


def test_the_standard_streams_and_their_layers_travel_by_reference(job: Path) -> None:
    streams = [sys.stdout, sys.stderr, sys.__stdout__]
    parts = [getattr(s, "buffer", None) for s in streams]
    parts += [getattr(p, "raw", None) for p in parts]
    values = [v for v in streams + parts if v is not None]
    back = _round_trip(values)
    assert all(a is b for a, b in zip(back, values, strict=True))


# -- end to end -----------------------------------------------------------------------------------


def _tree(root: Path) -> dict[str, bytes]:
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and "__pycache__" not in rel and not rel.endswith(".portal"):
            found[rel] = path.read_bytes()
    return found


def _plain(tmp_path: Path, script: str) -> tuple[bytes, dict[str, bytes]]:
    where = tmp_path / "plain"
    where.mkdir()
    shutil.copy(SCRIPTS / script, where / script)
    done = subprocess.run(
        [sys.executable, script], cwd=where, capture_output=True, timeout=120, check=True
    )
    assert done.stderr == b""
    return done.stdout, _tree(where)


def _paused_chain(
    tmp_path: Path,
    script: str,
    rng: random.Random,
    *,
    fresh: bool,
    max_pauses: int = 3,
    first_delay: float | None = None,
) -> tuple[bytes, bytes, int, Path]:
    """Run ``script`` in a job directory under the runtime, SIGTERM it at a random moment once
    armed (the first time after ``first_delay`` if given), resume (each time in a new empty
    directory when ``fresh``) until it ends."""
    here = tmp_path / "run0"
    here.mkdir()
    shutil.copy(SCRIPTS / script, here / script)
    work = short_dir()
    sock, ckpt = os.path.join(work, "c.sock"), os.path.join(work, "ck.portal")
    cmd = runtime("run", "--control", sock, "--checkpoint", ckpt, script)
    out = err = b""
    for attempt in range(max_pauses + 1):
        proc = subprocess.Popen(cmd, cwd=here, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        control = connect(proc, sock)
        if control is not None and attempt < max_pauses:
            delay = rng.uniform(0.0, 0.5)
            time.sleep(first_delay if first_delay is not None and not attempt else delay)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        seg_out, seg_err = proc.communicate(timeout=120)
        if control is not None:
            control.close()
        out, err = out + seg_out, err + seg_err
        if proc.returncode != EXIT_PAUSED:
            assert proc.returncode == 0, seg_err.decode()
            return out, err, attempt, here  # paused once before each resume
        if fresh:
            here = tmp_path / f"run{attempt + 1}"
            here.mkdir()
        cmd = runtime("resume", "--control", sock, ckpt)
    raise AssertionError("the job did not end")


@pytest.mark.parametrize("fresh", [False, True], ids=["same-dir", "fresh-dir"])
@pytest.mark.parametrize("script", ["train_log.py", "read_lines.py"])
def test_paused_and_resumed_the_output_and_files_are_those_of_a_plain_run(
    tmp_path: Path, rng: random.Random, script: str, fresh: bool
) -> None:
    expected_out, expected_files = _plain(tmp_path, script)
    out, err, pauses, final = _paused_chain(tmp_path, script, rng, fresh=fresh)
    if not pauses:  # the signal came after the end on a loaded machine: once more, early
        shutil.rmtree(tmp_path / "run0")
        out, err, pauses, final = _paused_chain(tmp_path, script, rng, fresh=fresh, first_delay=0)
    assert pauses, "the job was never paused"
    assert err == b""
    assert out == expected_out
    assert _tree(final) == expected_files
