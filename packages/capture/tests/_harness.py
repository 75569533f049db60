"""Real-process helpers for the capture tests: run, pause, resume, compare."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

CORPUS = Path(__file__).parent / "corpus"
EXIT_PAUSED = 75
EXIT_REFUSED = 65


def runtime(*args: str) -> list[str]:
    return [sys.executable, "-m", "portal.runtime", *args]


def short_dir() -> str:
    """A short directory for Unix sockets (their paths are limited to ~107 bytes)."""
    return tempfile.mkdtemp(prefix="pc", dir="/tmp")


class Control:
    """A client of a runtime's control socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.file = sock.makefile("rb")
        self.hello = self.next_event()

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def pause(self, within: float = 10.0) -> None:
        self.send({"op": "pause", "deadline": time.time() + within})

    def cancel(self) -> None:
        self.send({"op": "cancel"})

    def next_event(self, timeout: float = 30.0) -> dict[str, Any]:
        self.sock.settimeout(timeout)
        line = self.file.readline()
        if not line:
            raise EOFError("control channel closed")
        return json.loads(line)

    def events_until(self, kinds: set[str], timeout: float = 30.0) -> list[dict[str, Any]]:
        """Events up to and including the first whose kind is in ``kinds``."""
        seen = []
        end = time.monotonic() + timeout
        while True:
            event = self.next_event(max(0.1, end - time.monotonic()))
            seen.append(event)
            if event["event"] in kinds:
                return seen

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
            self.sock.close()


def connect(proc: subprocess.Popen[bytes], path: str, timeout: float = 20.0) -> Control | None:
    """Wait until the runtime listens and greets (it is armed then); None if it ended first.

    A connection that ends before the greeting while the process runs on is tried again, as
    the node's link does; the error names what happened when no greeting came in ``timeout``
    (a test that then sees no pause knows why)."""
    end = time.monotonic() + timeout
    last = "the socket never appeared"
    while time.monotonic() < end:
        if proc.poll() is not None:
            return None
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            s.close()
            last = f"connecting: {exc!r}"
            time.sleep(0.005)
            continue
        try:
            return Control(s)
        except (EOFError, OSError) as exc:
            s.close()
            last = f"connected, then no greeting: {exc!r}"
            time.sleep(0.05)
    raise TimeoutError(f"runtime did not greet on {path} within {timeout}s ({last})")


@dataclass
class Segment:
    rc: int
    stdout: bytes
    stderr: bytes
    how: str


@dataclass
class Chain:
    segments: list[Segment] = field(default_factory=list)

    @property
    def stdout(self) -> bytes:
        return b"".join(s.stdout for s in self.segments)

    @property
    def stderr(self) -> bytes:
        return b"".join(s.stderr for s in self.segments)

    @property
    def pauses(self) -> int:
        return sum(s.rc == EXIT_PAUSED for s in self.segments)


def paused_at_least_once(chains: list[Chain], rerun: Callable[[], Chain]) -> list[Chain]:
    """``chains`` plus, if none of them paused, one more from ``rerun`` (which should pause as
    soon as the runtime is armed: ``max_delay=0``).

    Random delays may all land after a short script has ended on a loaded machine; the extra
    chain makes sure every differential test really exercises a pause and a resume.
    """
    if any(c.pauses for c in chains):
        return chains
    return [*chains, rerun()]


def plain_run(
    script: Path, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        cwd=cwd or script.parent,
        timeout=120,
        check=False,
    )


def run_chain(
    script: Path,
    rng: random.Random,
    *,
    args: tuple[str, ...] = (),
    max_pauses: int = 4,
    max_delay: float = 0.35,
    cwd: Path | None = None,
) -> Chain:
    """Run ``script`` under the runtime and pause it at random moments (SIGTERM or a node
    request, at random), resuming each time in a new process, until it ends."""
    work = short_dir()
    ckpt = os.path.join(work, "ck.portal")
    sock = os.path.join(work, "ctl.sock")
    chain = Chain()
    cmd = runtime("run", "--checkpoint", ckpt, "--control", sock, str(script), *args)
    for attempt in range(max_pauses + 1):
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd or script.parent
        )
        control = connect(proc, sock)
        how = "none" if control is not None else "ended before the runtime listened"
        if control is not None and attempt < max_pauses:
            time.sleep(rng.uniform(0, max_delay))
            if rng.random() < 0.5:
                how = "sigterm"
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
            else:
                how = "node"
                with contextlib.suppress(OSError):
                    control.pause()
        out, err = proc.communicate(timeout=120)
        if control is not None:
            control.close()
        chain.segments.append(Segment(proc.returncode, out, err, how))
        if proc.returncode != EXIT_PAUSED:
            break
        cmd = runtime("resume", "--control", sock, ckpt)
    return chain


def run_to_end(
    script: Path, ckpt: Path, *, cwd: Path | None = None, max_runs: int = 5, timeout: float = 180
) -> tuple[list[int], bytes, bytes]:
    """Run ``script`` under the runtime, resuming after each pause the script asks for itself,
    until it ends (or ``max_runs`` processes ran): exit codes and the combined output."""
    cmd = runtime("run", "--checkpoint", str(ckpt), str(script))
    codes: list[int] = []
    out = err = b""
    while len(codes) < max_runs:
        done = subprocess.run(
            cmd, capture_output=True, cwd=cwd or script.parent, timeout=timeout, check=False
        )
        codes.append(done.returncode)
        out, err = out + done.stdout, err + done.stderr
        if done.returncode != EXIT_PAUSED:
            break
        cmd = runtime("resume", str(ckpt))
    return codes, out, err


class Paused(NamedTuple):
    events: list[dict[str, Any]]
    #: The paused run's whole stdout, and its stderr.
    out: bytes
    err: bytes
    returncode: int | None
    checkpoint: str


def pause_when(
    script: Path,
    *args: str,
    ready: Callable[[bytes], bool],
    settle: float = 0.0,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> Paused:
    """Run ``script`` under the runtime with a control socket; once its output so far makes
    ``ready`` true (and ``settle`` seconds more), ask for a pause as the node does; return the
    events up to its outcome and the run's output."""
    work = short_dir()
    ckpt, sock = f"{work}/ck.portal", f"{work}/ctl.sock"
    cmd = runtime("run", "--checkpoint", ckpt, "--control", sock, str(script), *args)
    # Unbuffered: the lines read here one at a time must leave the rest in the pipe, where
    # communicate() reads it (a buffered reader would keep what it read ahead, and lose it).
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env, bufsize=0
    )
    assert proc.stdout is not None
    try:
        control = connect(proc, sock, timeout=timeout)
        assert control is not None
        first = b""
        while not ready(first):
            line = proc.stdout.readline()
            assert line, first
            first += line
        time.sleep(settle)
        control.pause(within=120)
        events = control.events_until({"paused", "abandoned", "failed"}, timeout=timeout)
        control.close()
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return Paused(events, first + out, err, proc.returncode, ckpt)


def pause_at_line(script: Path, *args: str, line: bytes, cwd: Path) -> tuple[bytes, str]:
    """Run ``script`` under the runtime; once it prints a line starting with ``line``, pause it
    as the node does. Returns its output and the checkpoint."""
    paused = pause_when(
        script,
        *args,
        ready=lambda out: bool(out) and out.splitlines()[-1].startswith(line),
        cwd=cwd,
        timeout=300,
    )
    assert paused.events[-1]["event"] == "paused", (paused.events, paused.err.decode()[-3000:])
    assert paused.returncode == EXIT_PAUSED, paused.err.decode()[-3000:]
    return paused.out, paused.checkpoint


def resume_noted(
    ckpt: str, cwd: Path, env: dict[str, str] | None = None
) -> tuple[bytes, bytes, list[str]]:
    """Resume ``ckpt`` to its end; its output and the notes its greeting gave the node."""
    sock = os.path.join(short_dir(), "c.sock")
    proc = subprocess.Popen(
        runtime("resume", "--checkpoint", ckpt + ".next", ckpt),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**(env or os.environ), "PORTAL_RUNTIME_CONTROL": sock},
    )
    control = connect(proc, sock, timeout=120)
    notes = list(control.hello.get("notes", [])) if control is not None else []
    out, err = proc.communicate(timeout=300)
    if control is not None:
        control.close()
    assert proc.returncode == 0, err.decode()[-3000:]
    return out, err, notes


def tensorboard_scalars(
    folder: Path, skip: tuple[str, ...] = ()
) -> tuple[int, list[tuple[str, str, int, float]]]:
    """The TensorBoard event files under ``folder``: how many, and every scalar they hold as
    (run folder, tag, step, value), in the order written (each file's by its name, which begins
    with its writer's start time); tags ending with one of ``skip`` left out (wall times)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    files = sorted(folder.rglob("events.out.tfevents.*"), key=lambda p: (p.parent, p.name))
    found = []
    for path in files:
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if skip and value.tag.endswith(skip):
                    continue
                number = value.tensor.float_val[0] if value.tensor.float_val else value.simple_value
                found.append((str(path.parent.relative_to(folder)), value.tag, event.step, number))
    return len(files), found


def wandb_history(folder: Path) -> tuple[set[str], list[tuple[int, float]]]:
    """The run ids and the (step, loss) history of every offline run under ``folder/wandb``,
    read from their ``.wandb`` files in the order the runs started: wandb's transaction log, a
    7-byte file header, then records in 32 KiB blocks (each a CRC, a length and a type: whole,
    first, middle or last part), each a ``wandb_internal_pb2.Record``."""
    import struct

    from wandb.proto import wandb_internal_pb2

    ids: set[str] = set()
    history: list[tuple[int, float]] = []
    for path in sorted(folder.glob("wandb/offline-run-*/run-*.wandb")):
        ids.add(path.stem.removeprefix("run-"))
        data, pos, pending = path.read_bytes(), 7, b""
        while pos + 7 <= len(data):
            if 32768 - pos % 32768 < 7:
                pos += 32768 - pos % 32768  # a block's tail too short for a header
                continue
            _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
            pending += data[pos + 7 : pos + 7 + length]
            pos += 7 + length
            if kind in (1, 4):  # a whole record, or its last part
                record = wandb_internal_pb2.Record()
                record.ParseFromString(pending)
                pending = b""
                if record.WhichOneof("record_type") == "history":
                    items = {
                        i.key or "/".join(i.nested_key): i.value_json for i in record.history.item
                    }
                    if "loss" in items:
                        history.append((record.history.step.num, float(items["loss"])))
    return ids, history


class AgainstPlain(NamedTuple):
    """A script run plainly in ``plain`` and, in ``job``, paused once and resumed to its end."""

    plain: subprocess.CompletedProcess[bytes]
    #: The paused run's output, then the resumed run's; the resumed run's stderr.
    out: bytes
    err: bytes
    plain_dir: Path
    job: Path
    #: The paused run's output alone (where the pause came).
    paused_out: bytes = b""


def paused_against_plain(
    tmp_path: Path,
    source: Path,
    *args: str,
    ready: Callable[[bytes], bool],
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> AgainstPlain:
    """Copy ``source`` into two directories; run it plainly in one and, under the runtime in
    the other, pause it (as the node does) once its output makes ``ready`` true, then resume it
    to its end in a new process. Asserts that the plain run passed and the pause was taken."""
    plain_dir, job = tmp_path / "plain", tmp_path / "job"
    for where in (plain_dir, job):
        where.mkdir()
        shutil.copy(source, where / source.name)
    plain = subprocess.run(
        [sys.executable, source.name, *args],
        cwd=plain_dir, capture_output=True, timeout=timeout, env=env, check=False,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr.decode()[-3000:]
    paused = pause_when(job / source.name, *args, ready=ready, cwd=job, env=env, timeout=timeout)
    assert paused.events[-1]["event"] == "paused", (paused.events, paused.err.decode()[-3000:])
    assert paused.returncode == EXIT_PAUSED, paused.err.decode()[-3000:]
    after, err, _ = resume_noted(paused.checkpoint, job, env=env)
    return AgainstPlain(plain, paused.out + after, err, plain_dir, job, paused.out)


def roundtrip(obj: Any) -> Any:
    """``obj`` through the checkpoint's pickler with every plugin's reducers, loaded back from
    its buffers in this process, as a resume loads them."""
    import pickle

    from portal.capture._plugins import load_reducers
    from portal.capture.pickler import dumps, resolve_reducers

    data, buffers, _ = dumps(obj, namespaces={}, reducers=resolve_reducers(load_reducers()))
    return pickle.loads(data, buffers=[memoryview(bytearray(b)) for b in buffers])
