"""The shared fake HTTP server the providers' conformance fakes are built on."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from portal.providers.base.testing import FakeHTTPServer, RecordedRequest, Reply, loopback_only


class Echo(FakeHTTPServer):
    """Answers the path; ``/hang`` waits until ``release`` is set (a hanging GET)."""

    def __init__(self) -> None:
        super().__init__()
        self.released = False

    def respond(self, request: RecordedRequest) -> Reply:
        if request.path == "/hang":
            self.wait_for(lambda: self.released, 30.0)
        return Reply(200, f"{request.method} {request.path}".encode())


@pytest.fixture
def fake() -> Iterator[Echo]:
    with Echo() as server:
        yield server


def get(
    fake: FakeHTTPServer,
    path: str,
    *,
    timeout: float = 5.0,
    method: str = "GET",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_answers_on_loopback_and_logs_requests(fake: Echo) -> None:
    assert fake.url.startswith("http://127.0.0.1:")
    assert get(fake, "/a/b?x=1&y=2", method="PUT", body=b"hi", headers={"X-Test": "v"}) == (
        200,
        b"PUT /a/b",
    )
    (request,) = fake.requests
    assert request.path == "/a/b" and request.query == {"x": "1", "y": "2"}
    assert request.header("X-TEST") == "v" and request.body == b"hi"
    assert fake.count("/a") == 1 and fake.count("/a", method="GET") == 0
    fake.clear_requests()
    assert fake.requests == []


def test_fail_next_applies_to_matching_paths_only_and_expires(fake: Echo) -> None:
    fake.fail_next(503, times=2, path="/x", body=b"busy")
    assert get(fake, "/y")[0] == 200
    assert get(fake, "/x") == (503, b"busy")
    assert get(fake, "/x/1") == (503, b"busy")
    assert get(fake, "/x")[0] == 200


def test_malformed_body_and_content_type(fake: Echo) -> None:
    fake.malform_next(b"<html>oops", content_type="text/html")
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)
    try:
        conn.request("GET", "/")
        response = conn.getresponse()
        assert response.getheader("Content-Type") == "text/html"
        assert response.read() == b"<html>oops"
    finally:
        conn.close()


def test_delay_next(fake: Echo) -> None:
    fake.delay_next(0.3)
    start = time.monotonic()
    assert get(fake, "/")[0] == 200
    assert time.monotonic() - start >= 0.3


def test_drop_next_closes_without_answer(fake: Echo) -> None:
    fake.drop_next()
    with pytest.raises(http.client.RemoteDisconnected):
        get(fake, "/")
    assert get(fake, "/")[0] == 200


def test_truncate_next_cuts_the_body(fake: Echo) -> None:
    fake.truncate_next()
    with pytest.raises(http.client.IncompleteRead):
        get(fake, "/long-enough-path")


def test_stop_answering_times_clients_out_until_resumed(fake: Echo) -> None:
    fake.stop_answering()
    with pytest.raises(TimeoutError):
        get(fake, "/", timeout=0.3)
    fake.resume_answering()
    assert get(fake, "/")[0] == 200


def test_keep_alive_connections_are_served_and_closed(fake: Echo) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)
    try:
        for _ in range(3):
            conn.request("GET", "/k")
            assert conn.getresponse().read() == b"GET /k"
        # The fake closes while this idle keep-alive connection is open: it must not hang.
        start = time.monotonic()
        fake.close()
        assert time.monotonic() - start < 2.0
    finally:
        conn.close()


def test_close_wakes_a_hanging_request() -> None:
    fake = Echo().start()
    errors: list[BaseException] = []

    def hang() -> None:
        try:
            get(fake, "/hang", timeout=10)
        except (OSError, http.client.HTTPException) as exc:
            errors.append(exc)

    thread = threading.Thread(target=hang)
    thread.start()
    assert fake.wait_for(lambda: fake.count("/hang") == 1, 5.0)
    start = time.monotonic()
    fake.close()
    thread.join(5)
    assert time.monotonic() - start < 2.0 and not thread.is_alive()
    assert errors  # the client saw the connection end, not an answer
    fake.close()  # idempotent


def test_port_before_start_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        _ = Echo().port


def test_loopback_only_refuses_other_addresses() -> None:
    with loopback_only():
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            with pytest.raises(ConnectionRefusedError, match="loopback only"):
                sock.connect(("169.254.169.254", 80))
        finally:
            sock.close()
        with pytest.raises(socket.gaierror, match="loopback only"):
            socket.getaddrinfo("metadata.google.internal", 80)
    with Echo() as fake, loopback_only():
        assert get(fake, "/")[0] == 200
