"""Who may read the console: with a token, only the one who holds it (as Jupyter does).

The console listens on 127.0.0.1, which every user of this machine can reach; jobs' output
may hold what only their owner should read. ``portal console --auth`` (or
``PORTAL_CONSOLE_AUTH=1``) makes a new token each start and prints the address that carries
it, ``http://127.0.0.1:8470/?token=...``. A request shows it in one of three ways:

- ``?token=...`` once: the answer sets a cookie (HttpOnly, SameSite=Strict), and a page's
  address is given again without the token, so it stays out of the address bar and bookmarks;
- that cookie, which the browser then sends with the page's own requests;
- ``Authorization: Bearer ...``, for a script (``curl -H``).

Anything else is answered 401 with a page that says how to get in. Tokens are compared in
constant time (:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import hmac
import html
import secrets

from starlette.datastructures import URL, MutableHeaders
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocketClose

__all__ = ["TOKEN_PARAM", "TokenGate", "cookie_name", "new_token"]

#: The query parameter that carries the token (as Jupyter's does).
TOKEN_PARAM = "token"


def new_token() -> str:
    """A token of 256 random bits, URL-safe: new for each start of the console."""
    return secrets.token_urlsafe(32)


def cookie_name(port: int | None) -> str:
    """The cookie of the console on ``port``: browsers share cookies between the ports of one
    host, so two consoles on one machine keep a cookie each."""
    return "portal-console" if port is None else f"portal-console-{port}"


class TokenGate:
    """ASGI middleware: ``app`` answers only requests that show ``token``."""

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # none is served today; none gets past without it
            await self._socket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        cookie = cookie_name(_port(scope))
        offered = request.query_params.get(TOKEN_PARAM)
        if offered is not None:
            if not self._matches(offered):
                await _refusal(request, "the token in the address is not this console's")(
                    scope, receive, send
                )
            elif _is_page(request):
                # The cookie now holds it: the page again, without the token in its address.
                redirect = RedirectResponse(_without_token(request.url), status_code=303)
                _set_cookie(redirect, cookie, offered)
                await redirect(scope, receive, send)
            else:
                await self.app(scope, receive, _setting_cookie(send, cookie, offered))
            return
        if self._matches(request.cookies.get(cookie)) or self._matches(_bearer(request)):
            await self.app(scope, receive, send)
            return
        await _refusal(request, "this request shows no token")(scope, receive, send)

    async def _socket(self, scope: Scope, receive: Receive, send: Send) -> None:
        connection = HTTPConnection(scope)
        shown = (
            connection.query_params.get(TOKEN_PARAM),
            connection.cookies.get(cookie_name(_port(scope))),
            _bearer(connection),
        )
        if any(self._matches(offered) for offered in shown):
            await self.app(scope, receive, send)
        else:
            await WebSocketClose(code=1008, reason="this console asks for its token")(
                scope, receive, send
            )

    def _matches(self, offered: str | None) -> bool:
        if offered is None:
            return False
        return hmac.compare_digest(offered.encode(), self._token)


def _port(scope: Scope) -> int | None:
    server = scope.get("server")
    return int(server[1]) if server and server[1] is not None else None


def _is_page(request: Request) -> bool:
    """A page a browser shows (not the JSON API, which a script may call with ?token=)."""
    return request.method in ("GET", "HEAD") and not request.url.path.startswith("/api/")


def _without_token(url: URL) -> str:
    """The same address, relative (this host, whatever the request named), without the token."""
    kept = url.remove_query_params(TOKEN_PARAM)
    return kept.path + (f"?{kept.query}" if kept.query else "")


def _bearer(connection: HTTPConnection) -> str | None:
    scheme, _, credentials = connection.headers.get("authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


def _set_cookie(response: Response, name: str, token: str) -> None:
    # No Max-Age: the cookie ends with the browser's session, and the token with the console.
    response.set_cookie(name, token, path="/", httponly=True, samesite="strict")


def _setting_cookie(send: Send, name: str, token: str) -> Send:
    """``send``, with the token's cookie set on the answer it starts."""
    cookie = Response()
    _set_cookie(cookie, name, token)
    set_cookie = cookie.headers["set-cookie"]

    async def send_setting_cookie(message: Message) -> None:
        if message["type"] == "http.response.start":
            MutableHeaders(scope=message).append("set-cookie", set_cookie)
        await send(message)

    return send_setting_cookie


def _refusal(request: Request, why: str) -> Response:
    """401, saying how to get in: the address the console printed, or a bearer header."""
    port = _port(request.scope)
    where = f"http://127.0.0.1:{port}/?token=..." if port else "http://127.0.0.1:PORT/?token=..."
    words = (
        f"{why}: open the address `portal console` printed when it started ({where}), "
        "or send the header `Authorization: Bearer TOKEN`. The token is new each time the "
        "console starts: after a restart, open the new address"
    )
    headers = {"WWW-Authenticate": 'Bearer realm="portal console"', "Cache-Control": "no-store"}
    if request.url.path.startswith("/api/"):
        return JSONResponse(
            {"error": words, "code": "UNAUTHORIZED"}, status_code=401, headers=headers
        )
    body = (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        "<title>Portal: the console asks for its token</title>\n</head>\n"
        '<body data-page="token">\n<h1>This console asks for its token</h1>\n'
        f'<p id="error">{html.escape(words[:1].upper() + words[1:])}.</p>\n</body>\n</html>\n'
    )
    return Response(body, status_code=401, media_type="text/html; charset=utf-8", headers=headers)
