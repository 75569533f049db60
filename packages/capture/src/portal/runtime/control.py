"""The control channel: how Portal's node process asks a running script to pause.

The runtime listens on a Unix-domain socket (``--control PATH`` or ``PORTAL_RUNTIME_CONTROL``).
A client sends JSON lines::

    {"op": "pause", "deadline": 1733140000.5}   # unix time
    {"op": "cancel"}
    {"op": "probe", "deadline": 1733140030.0}    # the checkpoint check; deadline optional
    {"op": "checkpoint", "path": "/ckpt/periodic-3.portal"}   # write one and run on

and receives every event of the pause lifecycle as JSON lines, starting with ``hello``::

    {"event": "hello", "pid": 4242, "pending": false}
    {"event": "pending", "source": "node", "deadline": ...}
    {"event": "deferred", "problems": [{"name": "fh", "type_name": "_io.TextIOWrapper", ...}]}
    {"event": "paused", "checkpoint": "/ckpt/job.portal", "bytes": 123456, ...}
    {"event": "abandoned", "reason": "deadline" | "cancelled", "problems": [...]}
    {"event": "failed", "error": "..."}
    {"event": "probe", "problems": [...], "partial": false, "checked_bytes": 123, "where": ...}
    {"event": "checkpointed", "checkpoint": "/ckpt/periodic-3.portal", "bytes": 123,
     "stall_seconds": 0.04, "where": "train.py:42"}
    {"event": "not-checkpointed", "reason": "pause" | "problems" | "deadline" | "error", ...}
    {"event": "error", "message": "..."}    # a message the runtime could not understand

Messages are read on the main thread: each client socket is set ``O_ASYNC``, so the kernel
raises ``SIGIO`` when a line arrives and the main thread's handler reads it between two
bytecodes (well under a millisecond, even in a busy loop). A Python watcher thread would first
have to win the GIL from the busy main thread (the 5 ms switch interval, twice). The watcher
thread only accepts connections and abandons a pending pause on time when its deadline passes;
it blocks in ``select`` (no cost while idle). The socket file is removed when the process exits.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import selectors
import signal
import socket
import threading
import time
from types import FrameType
from typing import Any, Protocol

import msgspec

from portal.capture.notes import restore_notes
from portal.capture.restoring import register_live
from portal.capture.unseen import UnseenThread
from portal.runtime.protocol import (
    Cancel,
    Checkpoint,
    Hello,
    Pause,
    Probe,
    ProtocolError,
    RuntimeRequest,
    take_secret,
)

__all__ = [
    "CONTROL_ENV",
    "Cancel",
    "Checkpoint",
    "ControlChannel",
    "Hello",
    "Message",
    "Pause",
    "Probe",
    "ProtocolError",
]

CONTROL_ENV = "PORTAL_RUNTIME_CONTROL"


Message = RuntimeRequest


class _Engine(Protocol):
    def request_pause(self, deadline: float, source: str) -> None: ...
    def cancel(self, reason: str = ...) -> None: ...
    def request_probe(self, deadline: float | None = ...) -> None: ...
    def request_checkpoint(self, path: str, deadline: float | None = ...) -> None: ...
    def stop_probe_if_due(self, frame: FrameType | None = ...) -> None: ...
    def note_obstacle(self, frame: FrameType | None) -> None: ...
    def expire(self) -> None: ...
    def deadline(self) -> float | None: ...
    def pending(self) -> bool: ...


_decode = msgspec.json.Decoder(Message).decode
_encode = msgspec.json.Encoder().encode
_MAX_LINE = 64 * 1024


class ControlChannel:
    """Serves the control socket at ``path``: accepts on a daemon thread, reads on ``SIGIO``."""

    def __init__(self, path: str) -> None:
        self.path = path
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a stale socket of an earlier run of this job
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(path)
        self._server.listen(8)
        self._wake_r, self._wake_w = socket.socketpair()
        self._clients: dict[socket.socket, bytearray] = {}
        # Re-entrant: ``drain`` runs in the main thread's SIGIO handler, which may interrupt the
        # main thread while it holds this lock in ``send`` (a periodic checkpoint's report, say);
        # a plain lock would then wait for itself for ever.
        self._lock = threading.RLock()
        self._engine: _Engine | None = None
        self._closed = False
        self._previous_sigio: Any = None

    def start(self, engine: _Engine) -> None:
        """Install the ``SIGIO`` handler (main thread) and start accepting."""
        self._engine = engine
        register_live(self)  # its SIGIO handler, held by the program's state, finds it
        self._previous_sigio = signal.signal(signal.SIGIO, self._on_sigio)
        # Not among the program's threads (``threading.enumerate()``), as in a plain run; it
        # runs until the process exits, like a daemon thread.
        UnseenThread(self._serve)

    def send(self, event: Any) -> None:
        """Send ``event`` (a msgspec struct) to every connected client (any thread)."""
        line = _encode(event) + b"\n"
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            self._send_to(client, line)
        if event.__class__.__name__ == "Pending":
            self._poke()  # the watcher recomputes its deadline timer

    def _send_to(self, client: socket.socket, line: bytes) -> None:
        """Send on a non-blocking socket; a node that stops reading for 2 s is dropped."""
        view = memoryview(line)
        give_up = time.monotonic() + 2.0
        try:
            while view:
                try:
                    view = view[client.send(view) :]
                except BlockingIOError:
                    if time.monotonic() > give_up:
                        raise
                    select.select([], [client], [], 0.05)
        except OSError:
            self._drop(client)

    def _drop(self, client: socket.socket) -> None:
        with self._lock:
            self._clients.pop(client, None)
        with contextlib.suppress(OSError):
            client.close()

    def _poke(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def close(self) -> None:
        """Stop serving and remove the socket file (also right before a paused exit)."""
        if self._closed:
            return
        self._closed = True
        self._poke()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            with contextlib.suppress(OSError):
                client.close()
        if (
            self._previous_sigio is not None
            and threading.current_thread() is threading.main_thread()
        ):
            signal.signal(signal.SIGIO, signal.SIG_IGN)

    # -- reading: the main thread, on SIGIO ------------------------------------------------

    def _on_sigio(self, signum: int, frame: FrameType | None) -> None:
        self.drain()
        if self._engine is not None:
            self._engine.note_obstacle(frame)  # a pause asked for inside an import, say
            # Last, once every line is read: a pause that arrived during a checkpoint check
            # unwinds the check from here, and is taken at the same safe point.
            self._engine.stop_probe_if_due(frame)

    def drain(self) -> None:
        """Read and act on every complete line waiting on any client (main thread)."""
        engine = self._engine
        if engine is None:
            return
        with self._lock:
            clients = list(self._clients.items())
        for client, buffer in clients:
            while True:
                try:
                    data = client.recv(65536, socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    data = b""
                if not data:
                    self._drop(client)
                    break
                buffer += data
            while b"\n" in buffer:
                line, _, rest = bytes(buffer).partition(b"\n")
                buffer[:] = rest
                if line.strip():
                    self._handle(client, line, engine)
            if len(buffer) > _MAX_LINE:
                buffer.clear()
                self._send_to(client, _encode(ProtocolError(message="line too long")) + b"\n")

    def _handle(self, client: socket.socket, line: bytes, engine: _Engine) -> None:
        try:
            message = _decode(line)
        except msgspec.DecodeError as exc:
            self._send_to(
                client,
                _encode(
                    ProtocolError(
                        message=f"cannot understand {line[:200]!r}: {exc}. Send one JSON object "
                        'per line: {"op": "pause", "deadline": UNIX_TIME}, {"op": "cancel"}, '
                        '{"op": "probe"} or {"op": "checkpoint", "path": PATH}'
                    )
                )
                + b"\n",
            )
            return
        if isinstance(message, Pause):
            engine.request_pause(message.deadline, "node")
        elif isinstance(message, Probe):
            engine.request_probe(message.deadline)
        elif isinstance(message, Checkpoint):
            engine.request_checkpoint(message.path, message.deadline)
        else:
            engine.cancel("cancelled")

    # -- the watcher thread: accept, and deadlines -------------------------------------------

    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._server, selectors.EVENT_READ, None)
        selector.register(self._wake_r, selectors.EVENT_READ, None)
        engine = self._engine
        assert engine is not None
        while not self._closed:
            deadline = engine.deadline()
            timeout = None if deadline is None else max(0.0, deadline - time.time()) + 0.001
            try:
                ready = selector.select(timeout)
            except OSError:
                break
            for key, _ in ready:
                if key.fileobj is self._server:
                    self._accept(engine)
                else:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
            engine.expire()

    def _accept(self, engine: _Engine) -> None:
        try:
            client, _ = self._server.accept()
        except OSError:
            return
        client.setblocking(False)
        fd = client.fileno()
        fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK | os.O_ASYNC)
        with self._lock:
            self._clients[client] = bytearray()
        self._send_to(
            client,
            _encode(
                Hello(
                    pid=os.getpid(),
                    pending=engine.pending(),
                    notes=restore_notes(),
                    secret=take_secret(),
                )
            )
            + b"\n",
        )
        # Lines that arrived before O_ASYNC was set raised no SIGIO: have the main thread look.
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGIO)
