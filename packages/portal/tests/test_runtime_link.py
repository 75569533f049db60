"""The node believes only the runtime it started: a peer on the control socket must greet with
the attempt's secret before any event of its counts (a program that bound the path first cannot
name a file for the node to upload under the job's key). Real Unix sockets, a peer per test."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from portal.node.runtime_link import RuntimeLink
from portal.runtime.protocol import Checkpointed, Hello, encode

SECRET = "the-attempts-secret"


@pytest.fixture
def path() -> Iterator[Path]:
    folder = tempfile.mkdtemp(prefix="rl", dir="/tmp")  # a socket path is at most 107 bytes
    yield Path(folder) / "j-1.sock"
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
    os.rmdir(folder)


def serve(path: Path, *lines: bytes, hang_up: bool = False) -> threading.Thread:
    """A peer bound at ``path`` that says ``lines`` to the first client and waits (or, with
    ``hang_up``, closes at once, as a runtime whose job has ended does)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def run() -> None:
        client, _ = server.accept()
        client.sendall(b"".join(line + b"\n" for line in lines))
        if not hang_up:
            client.recv(1024)  # until the node closes
        client.close()
        server.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def events_of(link: RuntimeLink) -> list[object]:
    assert link.wait_connected(5.0)
    for _ in range(200):
        events = link.events()
        if events or link.refused:
            return list(events)
        threading.Event().wait(0.01)
    return []


CHECKPOINTED = encode(
    Checkpointed(checkpoint="/home/victim/evil.portal", bytes=10, stall_seconds=0.1)
)


def test_the_runtime_that_greets_with_the_secret_is_believed(path: Path) -> None:
    """... every event it sent, those still buffered when it hung up (a job that paused and
    ended) included."""
    serve(path, encode(Hello(pid=1, pending=False, secret=SECRET)), CHECKPOINTED, hang_up=True)
    link = RuntimeLink(path, SECRET)
    assert link.wait_connected(5.0)
    events: list[object] = []
    for _ in range(200):
        events += link.events()
        if not link.connected:
            break
        threading.Event().wait(0.01)
    assert [type(e).__name__ for e in events] == ["Hello", "Checkpointed"]
    assert link.trusted and link.refused is None


@pytest.mark.parametrize(
    "greeting",
    [
        encode(Hello(pid=1, pending=False)),  # no secret
        encode(Hello(pid=1, pending=False, secret="a-guess")),
        CHECKPOINTED,  # no greeting at all: straight to a checkpoint of its choosing
    ],
    ids=["no-secret", "wrong-secret", "no-greeting"],
)
def test_a_peer_that_does_not_prove_itself_is_dropped(path: Path, greeting: bytes) -> None:
    serve(path, greeting, CHECKPOINTED)
    link = RuntimeLink(path, SECRET)
    assert events_of(link) == []  # nothing it said reaches the node, the checkpoint least
    assert link.refused is not None and "did not prove it is the job's runtime" in link.refused
    assert not link.trusted and not link.connected
    assert not link.try_connect()  # and it is not asked again
