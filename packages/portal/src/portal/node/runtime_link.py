"""The node's side of the runtime's control channel (a Unix socket, JSON lines).

The runtime (``python -m portal.runtime``, in the job's process) serves the socket; the node
connects once the process has started, asks for pauses with a deadline, cancels them, and reads
the lifecycle events (``pending``, ``deferred``, ``paused``, ``abandoned``, ``failed``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import tempfile
import time
from pathlib import Path

import msgspec

from portal.core.private import private_folder
from portal.runtime.protocol import (
    Cancel,
    Checkpoint,
    Pause,
    Probe,
    RuntimeEvent,
    decode_runtime_event,
    encode,
)

__all__ = ["RuntimeLink", "control_socket_path"]

log = logging.getLogger("portal.node")


def control_socket_path(job_id: str, attempt: int) -> Path:
    """A short path for the socket (Unix socket paths are limited to about 100 bytes, so not
    under ``PORTAL_HOME``, which may be deep)."""
    base = private_folder(
        Path(tempfile.gettempdir()) / f"portal-{os.getuid()}", "the runtime's control sockets"
    )
    return base / f"{job_id}-{attempt}.sock"


class RuntimeLink:
    """A connection to one running script's control socket."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sock: socket.socket | None = None
        self._buffer = b""

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def try_connect(self) -> bool:
        """Connect if the runtime is listening yet; False (and try again later) if not."""
        if self._sock is not None:
            return True
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.path))
        except OSError:
            sock.close()
            return False
        sock.setblocking(False)
        self._sock = sock
        return True

    def _send(self, message: Pause | Cancel | Probe | Checkpoint) -> bool:
        if self._sock is None and not self.try_connect():
            return False
        assert self._sock is not None
        data = encode(message) + b"\n"
        try:
            self._sock.setblocking(True)
            self._sock.settimeout(2.0)
            self._sock.sendall(data)
        except OSError:
            self.close()
            return False
        finally:
            if self._sock is not None:
                self._sock.setblocking(False)
        return True

    def request_pause(self, deadline: float) -> bool:
        """Ask for a pause at the next safe point before ``deadline`` (Unix time)."""
        return self._send(Pause(deadline=deadline))

    def cancel(self) -> bool:
        return self._send(Cancel())

    def request_probe(self, deadline: float | None = None) -> bool:
        """Ask for the checkpoint check at the next safe point (waiting until ``deadline``)."""
        return self._send(Probe(deadline=deadline))

    def request_checkpoint(self, path: Path, deadline: float | None = None) -> bool:
        """Ask for a periodic checkpoint written to ``path`` at the next safe point; the program
        runs on (``checkpointed`` or ``not-checkpointed`` follows)."""
        return self._send(Checkpoint(path=str(path), deadline=deadline))

    def events(self) -> list[RuntimeEvent]:
        """Every complete event line received so far (non-blocking)."""
        if self._sock is None:
            return []
        while True:
            try:
                data = self._sock.recv(65536)
            except BlockingIOError:
                break
            except OSError:
                self.close()
                break
            if not data:
                self.close()
                break
            self._buffer += data
        out: list[RuntimeEvent] = []
        while b"\n" in self._buffer:
            line, _, self._buffer = self._buffer.partition(b"\n")
            try:
                out.append(decode_runtime_event(line))
            except msgspec.DecodeError as exc:  # a newer runtime's event: skip it, say so
                log.warning(
                    "ignoring an event the runtime sent that this node does not know: %s", exc
                )
        return out

    def wait_connected(self, timeout_s: float) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.try_connect():
                return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
