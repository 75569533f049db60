"""``portal console``: a read-only web console of one ``PORTAL_HOME``, on 127.0.0.1.

Starlette serves two pages (the jobs list and a job's run page), their script and style from
this package (nothing from the network), and a small JSON API the pages poll once a second:
a running job's page follows its state, events and output as they come. The run page's charts
are SVG drawn here (:mod:`portal.console.charts`), so the browser loads no chart library.
Every answer forbids inline script, other origins and framing (:mod:`portal.console.headers`);
with ``--auth`` only the holder of the token printed at start gets in
(:mod:`portal.console.access`): 127.0.0.1 keeps out other machines, not other local users.

Handlers are ``async`` and read the control plane on the event loop's thread: the reads are
short SQLite queries, and one thread keeps the store's connections and the checkpoint store
out of any thread pool.
"""

from __future__ import annotations

import html
import ipaddress
import os
import socket
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

from portal.console.chartdata import job_facts
from portal.console.extras import refuse_without_extra
from portal.console.joblist import job_rows
from portal.console.keyless import key_elsewhere, keyless_job
from portal.console.overview import banner, overview
from portal.control.store import JobNotFoundError
from portal.control.views import JobViews, unfinished_terminal_code, without_terminal_codes
from portal.core.domain import JobState
from portal.core.errors import InvalidArgumentError, PortalError
from portal.core.settings import boolean

# The web extra's modules (charts: leather): a missing one names the extra to install.
try:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
    from starlette.types import ASGIApp

    from portal.console.access import TokenGate, new_token
    from portal.console.charts import render_charts
    from portal.console.headers import SecurityHeaders
except ImportError as exc:
    refuse_without_extra("web", exc)
    raise

__all__ = ["AUTH_ENV", "DEFAULT_PORT", "build_app", "serve"]

DEFAULT_PORT = 8470
HOST = "127.0.0.1"
#: Set to 1 (or true, yes, on), the console asks for its token as `portal console --auth` does.
AUTH_ENV = "PORTAL_CONSOLE_AUTH"

_STATIC_TYPES = {
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}


def _asset(name: str) -> bytes:
    return resources.files("portal.console").joinpath("static", name).read_bytes()


def build_app(
    views: JobViews, *, clock: Callable[[], float] = time.time, token: str | None = None
) -> ASGIApp:
    """The console's application over ``views``' control plane; with ``token``, it answers
    only requests that show it (:mod:`portal.console.access`). Every answer carries the
    security headers (:mod:`portal.console.headers`)."""
    assets = {name: _asset(name) for name in ("index.html", "run.html", *_STATIC_TYPES)}

    def page(name: str) -> Response:
        return Response(assets[name], media_type="text/html; charset=utf-8", headers=_NO_STORE)

    async def jobs_page(request: Request) -> Response:
        return page("index.html")

    async def run_page(request: Request) -> Response:
        try:
            keyless_job(views, request.path_params["job"])
        except JobNotFoundError as exc:
            return _not_found(request.path_params["job"], str(exc))
        return page("run.html")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC_TYPES:
            return JSONResponse({"error": f"no asset {name!r}"}, status_code=404)
        return Response(assets[name], media_type=_STATIC_TYPES[name], headers=_NO_STORE)

    async def api_jobs(request: Request) -> Response:
        return JSONResponse({"jobs": job_rows(views, clock())}, headers=_NO_STORE)

    async def api_job(request: Request) -> Response:
        # A job whose key is elsewhere is shown from its records, with one line saying where
        # the key is (portal.console.keyless), never as an error page.
        job, key_line = keyless_job(views, request.path_params["job"])
        after = _int_param(request, "after", 0)
        status = None
        if key_line is None:
            try:
                status = views.status(job)
            except PortalError as exc:
                key_line = key_elsewhere(exc)
                if key_line is None:
                    raise
        if status is None:
            status = views.status(job, recorded_only=True)
        return JSONResponse(
            {
                "status": status,
                "overview": overview(status, clock(), key_elsewhere=key_line),
                "banner": banner(status),
                "events": views.timeline(job, after=after),
                "key_elsewhere": key_line,
            },
            headers=_NO_STORE,
        )

    async def api_charts(request: Request) -> Response:
        # From the records alone (no key needed): see portal.console.chartdata.
        job, _ = keyless_job(views, request.path_params["job"])
        store = views.plane.store
        attempts = store.attempts(job.id)
        events = [event for _, event in store.events(job.id)]
        # A job that runs no more ends its charts' time axis where it stopped, not at now.
        live = job.state in (JobState.RUNNING, JobState.PAUSING)
        ends = [a.ended_at or a.started_at for a in attempts] + [e.at for e in events]
        end = clock() if live or not ends else max(ends)
        facts = job_facts(attempts, events, origin=job.created_at, now=end)
        return JSONResponse({"charts": render_charts(facts)}, headers=_NO_STORE)

    async def api_logs(request: Request) -> Response:
        job, _ = keyless_job(views, request.path_params["job"])
        attempt = _int_param(request, "attempt", 1)
        stream = request.query_params.get("stream", "stdout")
        # Output a later attempt did again is left out, as `portal logs` leaves it out.
        why, *kept_bytes = views.log_notes(job).get(attempt, (None, None, None))
        kept = kept_bytes[1] if stream == "stderr" else kept_bytes[0]
        # A page opens a log at its end (tail=N: the last N bytes, from a line's start), so a
        # log of a gigabyte shows its latest lines at once; `start` above 0 says what is left out.
        if "offset" in request.query_params or "tail" not in request.query_params:
            offset = _int_param(request, "offset", 0)
        else:
            tail = _int_param(request, "tail", _LOG_CHUNK)
            if tail < 1:
                raise InvalidArgumentError(f"query parameter tail={tail}: give 1 or more bytes")
            offset = views.log_tail_start(job, attempt, stream, tail=tail, kept=kept)
        text, next_offset = views.read_log(
            job,
            attempt,
            stream,
            offset=offset,
            limit=min(_int_param(request, "limit", _LOG_CHUNK), _LOG_CHUNK_MAX),
            kept=kept,
        )
        # As a page shows text: a terminal's colour codes left out, one not yet whole held back.
        held = unfinished_terminal_code(text)
        if held:
            text, next_offset = text[:-held], next_offset - held
        return JSONResponse(
            {
                "text": without_terminal_codes(text),
                "start": offset,
                "next": next_offset,
                "note": why,
            },
            headers=_NO_STORE,
        )

    async def portal_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, PortalError)
        status = 500
        if isinstance(exc, JobNotFoundError):
            status = 404
        elif isinstance(exc, InvalidArgumentError):
            status = 400
        return JSONResponse({"error": str(exc), "code": exc.code}, status_code=status)

    app = Starlette(
        routes=[
            Route("/", jobs_page),
            Route("/jobs/{job}", run_page),
            Route("/static/{name}", static),
            Route("/api/jobs", api_jobs),
            Route("/api/jobs/{job}", api_job),
            Route("/api/jobs/{job}/logs", api_logs),
            Route("/api/jobs/{job}/charts", api_charts),
        ],
        # Only this machine's names: a page elsewhere cannot reach the console by rebinding DNS.
        middleware=[
            Middleware(TrustedHostMiddleware, allowed_hosts=[HOST, "localhost"]),
            *([Middleware(TokenGate, token=token)] if token is not None else []),
        ],
        exception_handlers={PortalError: portal_error},
    )
    return SecurityHeaders(app)


_NO_STORE = {"Cache-Control": "no-store"}
#: A log is read 256 kB at a time, and never more than 4 MB in one answer, whatever is asked.
_LOG_CHUNK = 256 * 1024
_LOG_CHUNK_MAX = 4 << 20


def _not_found(ref: str, why: str) -> Response:
    """The run page of a job that is not here: a 404 page saying so, with the way back."""
    name = html.escape(ref)
    body = (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>Portal: no job {name}</title>\n"
        '<link rel="stylesheet" href="/static/console.css">\n</head>\n'
        '<body data-page="missing">\n<header><a href="/" class="brand">Portal</a> '
        '<span class="where">console</span></header>\n'
        f'<main>\n<h1>No job {name}</h1>\n<p id="error" class="error">{html.escape(why)}</p>\n'
        '<p><a href="/">All jobs</a></p>\n</main>\n</body>\n</html>\n'
    )
    return Response(body, status_code=404, media_type="text/html; charset=utf-8", headers=_NO_STORE)


def _int_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidArgumentError(
            f"query parameter {name}={raw!r} is not a whole number: give e.g. {name}={default}"
        ) from None


def serve(
    views: JobViews,
    *,
    port: int = DEFAULT_PORT,
    announce: Callable[[str], Any] = print,
    auth: bool | None = None,
) -> int:
    """Serve the console on 127.0.0.1:``port`` (0: any free port) until interrupted.

    With ``auth`` (``portal console --auth``; None: the environment's ``PORTAL_CONSOLE_AUTH``),
    every request must show a token made now, which the announced address
    carries: 127.0.0.1 keeps other machines out, not other users of this one.
    """
    listener = _listen(port)
    bound = listener.getsockname()[1]
    token = new_token() if _asks_for_token(HOST, auth) else None
    config = uvicorn.Config(
        build_app(views, token=token), log_level="warning", access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    address = f"http://{HOST}:{bound}/" + (f"?token={token}" if token else "")
    announce(f"console on {address} (Ctrl-C stops it)")
    server.run(sockets=[listener])
    return 0


def _asks_for_token(host: str, auth: bool | None) -> bool:
    """Always beyond loopback; on it, when asked (``--auth``, ``PORTAL_CONSOLE_AUTH``)."""
    if not ipaddress.ip_address(host).is_loopback:
        return True
    if auth is not None:
        return auth
    raw = os.environ.get(AUTH_ENV, "")
    try:
        return bool(raw.strip()) and boolean(raw)
    except ValueError:
        raise InvalidArgumentError(
            f"{AUTH_ENV}={raw!r} is not true or false: set it to 1 to ask for a token, or "
            f"unset it (`portal console --auth` asks for one too)"
        ) from None


def _listen(port: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise InvalidArgumentError(
            f"--port {port} is not a TCP port: give one from 1 to 65535 (0 picks a free one)"
        )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        sock.close()
        raise InvalidArgumentError(
            f"cannot listen on {HOST}:{port} ({exc.strerror}): another program (or another "
            f"console) has it; give another port with `portal console --port P`"
        ) from None
    sock.listen(64)
    sock.set_inheritable(True)
    return sock
