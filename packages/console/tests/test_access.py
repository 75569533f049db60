"""The console over real HTTP: every answer says what a browser may load, run and frame; with
`--auth` (or PORTAL_CONSOLE_AUTH=1) nothing is shown without the token it printed at start,
taken once from the address, then from an HttpOnly SameSite=Strict cookie or a bearer header."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import subprocess
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from email.message import Message
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest
from conftest import PortalCli, console_announcing, screenshot

T = TypeVar("T")
PAGES = ("/", "/jobs/nope", "/static/console.js", "/static/console.css")
API = ("/api/jobs", "/api/jobs/nope", "/api/jobs/nope/logs", "/api/jobs/nope/charts")


def fetch(base: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, Message, str]:
    """GET ``path`` of the console at ``base`` as it answers (a redirect is not followed)."""
    where = urlsplit(base)
    connection = http.client.HTTPConnection(where.hostname or "", where.port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.headers, response.read().decode()
    finally:
        connection.close()


def directives(policy: str) -> dict[str, str]:
    """A Content-Security-Policy's directives, by name."""
    parts = (part.strip().split(None, 1) for part in policy.split(";") if part.strip())
    return {part[0]: part[1] if len(part) > 1 else "" for part in parts}


def assert_guarded(headers: Message, what: str) -> None:
    policy = headers.get("Content-Security-Policy")
    assert policy, f"{what}: no Content-Security-Policy"
    rules = directives(policy)
    assert rules["default-src"] == "'none'", what
    assert rules["script-src"] == "'self'", what
    assert rules["style-src"] == "'self'", what
    assert rules["frame-ancestors"] == "'none'", what
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy, what
    assert headers.get("X-Frame-Options") == "DENY", what
    assert headers.get("X-Content-Type-Options") == "nosniff", what


def token_of(address: str) -> str:
    found = re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=([A-Za-z0-9_-]+)", address)
    assert found, f"the console printed no token in its address: {address}"
    return found.group(1)


def test_every_answer_forbids_inline_script_other_origins_and_framing(console_url: str) -> None:
    for path in (*PAGES, "/static/nope", *API, "/nope"):
        status, headers, _ = fetch(console_url, path)
        assert status in (200, 404), (path, status)
        assert_guarded(headers, path)
    # A refused Host (another site's name rebound to 127.0.0.1) is answered with them too.
    status, headers, _ = fetch(console_url, "/", {"Host": "attacker.example"})
    assert status == 400
    assert_guarded(headers, "a refused host")


def test_on_loopback_without_auth_the_console_asks_for_no_token(console_url: str) -> None:
    for path in ("/", "/api/jobs", "/static/console.js"):
        status, _, _ = fetch(console_url, path)
        assert status == 200, path


def test_the_pages_work_under_their_policy_and_inline_script_is_refused(
    portal: PortalCli, console_url: str, page: Any
) -> None:
    from playwright.sync_api import expect

    run = portal("run", "--name", "policy", "progress.py")
    assert run.returncode == 0, run.stderr
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text))

    response = page.goto(f"{console_url}/")
    assert response is not None and "frame-ancestors 'none'" in response.headers.get(
        "content-security-policy", ""
    )
    expect(page.locator('#jobs tr[data-source="portal"]').first).to_contain_text("policy")
    page.goto(f"{console_url}/jobs/policy")
    expect(page.locator("body")).to_have_attribute("data-charts", "drawn")
    expect(page.locator('#charts svg[data-chart="attempts"]')).to_be_visible()
    expect(page.locator('#attempt-1 pre[data-stream="stdout"]')).to_contain_text("Grüße")
    expect(page.locator("#error")).to_be_hidden()
    screenshot(page, "run-page-under-its-policy")
    violations = [text for text in refused if "Content Security Policy" in text]
    assert violations == [], violations

    # The browser enforces it: a script put in the page inline does not run (and is reported,
    # which shows the watch above would have seen a refusal of the page's own).
    ran = page.evaluate(
        """() => {
            const script = document.createElement("script");
            script.textContent = "window.inlineRan = true";
            document.body.append(script);
            return window.inlineRan === true;
        }"""
    )
    assert ran is False
    for _ in range(50):
        if any("Content Security Policy" in text for text in refused):
            break
        page.wait_for_timeout(100)
    assert any("Content Security Policy" in text for text in refused), refused


@pytest.fixture(scope="module")
def guarded(portal: PortalCli) -> Iterator[str]:
    """`portal console --port 0 --auth`: the address it printed (with its token)."""
    with console_announcing(portal, "--auth") as address:
        yield address


def test_with_auth_nothing_is_shown_without_the_token(guarded: str) -> None:
    token = token_of(guarded)
    assert len(token) >= 40  # 256 random bits
    base = guarded.split("?")[0].rstrip("/")
    for path in (*PAGES, *API):
        status, headers, body = fetch(base, path)
        assert status == 401, (path, status)
        assert headers.get("WWW-Authenticate", "").startswith("Bearer"), path
        assert_guarded(headers, path)
        if path.startswith("/api/"):
            answer = json.loads(body)
            words = answer["error"]
            assert answer["code"] == "UNAUTHORIZED", path
        else:
            words = body
            assert "<h1>This console asks for its token</h1>" in body, path
        assert "this request shows no token: open the address `portal console` printed" in (
            words.lower()
        ), path
        assert f"{base}/?token=..." in words, path
        assert "Authorization: Bearer TOKEN" in words, path
        assert token not in body, path


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/?token=wrong", {}),
        ("/api/jobs?token=wrong", {}),
        ("/?token=%C3%BC", {}),  # not ASCII: refused, not an error
        ("/api/jobs", {"Authorization": "Bearer wrong"}),
        ("/api/jobs", {"Authorization": "Bearer"}),
        ("/api/jobs", {"Cookie": "portal-console-{port}=wrong"}),
    ],
)
def test_with_auth_a_wrong_token_is_refused(
    guarded: str, path: str, headers: dict[str, str]
) -> None:
    base = guarded.split("?")[0].rstrip("/")
    port = str(urlsplit(base).port)
    headers = {name: value.replace("{port}", port) for name, value in headers.items()}
    status, answer, body = fetch(base, path, headers)
    assert status == 401, body
    assert_guarded(answer, path)


def test_with_auth_the_token_is_taken_from_the_address_once_then_from_a_cookie(
    guarded: str,
) -> None:
    token = token_of(guarded)
    base = guarded.split("?")[0].rstrip("/")
    port = urlsplit(base).port

    status, headers, _ = fetch(base, f"/jobs/nope?token={token}&after=3")
    assert status == 303
    assert headers["Location"] == "/jobs/nope?after=3"  # the token out of the address
    cookie = headers["Set-Cookie"]
    assert cookie.startswith(f"portal-console-{port}={token};")
    flags = {flag.strip().lower() for flag in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/"} <= flags
    assert_guarded(headers, "the redirect")

    sent = {"Cookie": f"portal-console-{port}={token}"}
    for path in ("/", "/static/console.js", "/api/jobs"):
        status, headers, _ = fetch(base, path, sent)
        assert status == 200, path
        assert_guarded(headers, path)

    # A script asks the API with the token in the address, and is answered (cookie and all).
    status, headers, body = fetch(base, f"/api/jobs?token={token}")
    assert status == 200 and "jobs" in json.loads(body)
    assert headers["Set-Cookie"].startswith(f"portal-console-{port}={token};")


def test_with_auth_a_bearer_header_lets_a_script_in(guarded: str) -> None:
    token = token_of(guarded)
    base = guarded.split("?")[0].rstrip("/")
    status, _, body = fetch(base, "/api/jobs", {"Authorization": f"Bearer {token}"})
    assert status == 200 and "jobs" in json.loads(body)


def test_with_auth_the_browser_gets_in_by_the_printed_address(
    portal: PortalCli, guarded: str, page: Any
) -> None:
    from playwright.sync_api import expect

    run = portal("run", "--name", "behind-token", "progress.py")
    assert run.returncode == 0, run.stderr
    base = guarded.split("?")[0].rstrip("/")
    page.goto(guarded)
    expect(page).to_have_url(f"{base}/")  # the token is out of the address bar
    row = page.locator('#jobs tr[data-source="portal"]', has_text="behind-token")
    expect(row).to_be_visible()
    row.get_by_role("link").click()
    expect(page.locator('#attempt-1 pre[data-stream="stdout"]')).to_contain_text("Grüße")
    expect(page.locator("#error")).to_be_hidden()
    screenshot(page, "run-page-behind-token")


def test_the_environment_asks_for_the_token_as_auth_does(portal: PortalCli) -> None:
    with console_announcing(portal, env={"PORTAL_CONSOLE_AUTH": "1"}) as address:
        token_of(address)
        status, _, _ = fetch(address, "/api/jobs")
        assert status == 401


def test_a_setting_of_auth_that_is_not_true_or_false_is_refused(portal: PortalCli) -> None:
    result = subprocess.run(
        portal.command("console", "--port", "0"),
        cwd=portal.workdir,
        env={**portal.env, "PORTAL_CONSOLE_AUTH": "maybe"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 64, result.stderr
    assert "PORTAL_CONSOLE_AUTH='maybe' is not true or false: set it to 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_with_auth_a_websocket_without_the_token_is_closed_before_the_app() -> None:
    # No route takes a websocket today, and uvicorn serves none without its websocket extra:
    # the gate is checked as ASGI, so a route added later cannot slip past it.
    from portal.console.access import TokenGate

    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["query_string"].decode())

    async def knock(query: str) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "websocket.connect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "websocket",
            "path": "/ws",
            "query_string": query.encode(),
            "headers": [],
            "server": ("127.0.0.1", 8470),
        }
        await TokenGate(app, token="secret")(scope, receive, send)
        return sent

    assert in_own_loop(knock("token=wrong")) == [
        {"type": "websocket.close", "code": 1008, "reason": "this console asks for its token"}
    ]
    assert reached == []
    in_own_loop(knock("token=secret"))
    assert reached == ["token=secret"]


def in_own_loop(work: Coroutine[Any, Any, T]) -> T:
    """``work`` run to its end in a thread of its own: Playwright's sync API keeps an event loop
    running in this one while a module's browser is open."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, work).result()
