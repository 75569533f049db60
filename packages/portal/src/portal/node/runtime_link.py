"""The node's side of the runtime's control channel (a Unix socket, JSON lines).

The runtime (``python -m portal.runtime``, in the job's process) serves the socket; the node
connects once the process has started, asks for pauses with a deadline, cancels them, and reads
the lifecycle events (``pending``, ``deferred``, ``paused``, ``abandoned``, ``failed``).
"""

from __future__ import annotations

import contextlib
import hmac
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
    Hello,
    Pause,
    Probe,
    RuntimeEvent,
    decode_runtime_event,
    encode,
)

__all__ = ["RuntimeLink", "control_socket_folder", "control_socket_path"]

log = logging.getLogger("portal.node")


def control_socket_folder() -> Path:
    """This user's private folder for the sockets (:func:`portal.core.private.private_folder`:
    made, or closed to others, or refused with the reason and the way out)."""
    return private_folder(
        Path(tempfile.gettempdir()) / f"portal-{os.getuid()}", "the runtime's control sockets"
    )


def control_socket_path(job_id: str, attempt: int) -> Path:
    """A short path for the socket (Unix socket paths are limited to about 100 bytes, so not
    under ``PORTAL_HOME``, which may be deep)."""
    return control_socket_folder() / f"{job_id}-{attempt}.sock"


class RuntimeLink:
    """A connection to one running script's control socket.

    Nothing the peer says is believed until its greeting carries ``secret``, the one the node
    handed the process it started (:data:`portal.runtime.protocol.SECRET_ENV`): a program that
    bound the socket's path first cannot name a file for the node to upload under the job's key.
    A peer that greets otherwise is dropped and :attr:`refused` says why.
    """

    def __init__(self, path: Path, secret: str) -> None:
        self.path = path
        self.secret = secret
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._trusted = False
        #: Why the peer on the socket was not believed (None: it was, or none answered yet).
        self.refused: str | None = None

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def try_connect(self) -> bool:
        """Connect if the runtime is listening yet; False (and try again later) if not, or for
        good once a peer there was refused."""
        if self._sock is not None:
            return True
        if self.refused is not None:
            return False
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(self.path))
        except OSError:
            sock.close()
            return False
        sock.setblocking(False)
        self._sock = sock
        self._trusted = False
        self._buffer = b""
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

    @property
    def trusted(self) -> bool:
        """Whether the peer has greeted with this attempt's secret."""
        return self._trusted

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
        while b"\n" in self._buffer and self.refused is None:  # lines left after an EOF count
            line, _, self._buffer = self._buffer.partition(b"\n")
            try:
                event = decode_runtime_event(line)
            except msgspec.DecodeError as exc:  # a newer runtime's event: skip it, say so
                log.warning(
                    "ignoring an event the runtime sent that this node does not know: %s", exc
                )
                continue
            if not self._trusted:
                self._check_greeting(event)
                if not self._trusted:
                    break
            out.append(event)
        return out

    def _check_greeting(self, event: RuntimeEvent) -> None:
        """The first event must be the greeting with this attempt's secret; else drop the peer."""
        if isinstance(event, Hello) and hmac.compare_digest(event.secret, self.secret):
            self._trusted = True
            return
        self.refused = (
            f"the process on {self.path} did not prove it is the job's runtime (its first "
            f"message was {type(event).__name__}"
            + (" without this attempt's secret" if isinstance(event, Hello) else "")
            + "): another program of this user may have bound the socket's path. Nothing it "
            "says is believed; find it with `fuser` or `lsof` on the path"
        )
        log.warning("%s", self.refused)
        self._buffer = b""
        self.close()

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
