"""``portal server``: serve the control plane over HTTP, and manage its users' tokens.

::

    portal server [--db sqlite|PATH|postgresql://...] [--host 127.0.0.1] [--port 8471]
                  [--tokens FILE] [--tls-cert FILE --tls-key FILE] [--rate-limit N]
                  [--auth-failures N]
    portal server token create USER [--admin | --job JOB [--db DB]] [--expires 30d]
                               [--tokens FILE]    # prints the new token, once
    portal server token list [--tokens FILE]
    portal server token revoke USER [--tokens FILE]

``portal`` hands everything after ``server`` to :func:`main` (this distribution is optional).
Exit status as ``portal``'s: 64 for a usage error Portal explains, 69 when Portal itself failed.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import socket
import ssl
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from portal.control.select import open_database_store
from portal.control.store import JobNotFoundError
from portal.core.domain import Job
from portal.core.errors import InvalidArgumentError, PortalError
from portal.core.settings import Settings, parse_duration
from portal.server.owners import OWNERS_NAME, recorded_named, recorded_owner
from portal.server.tokens import TokenFile, check_token_request

__all__ = ["DEFAULT_PORT", "TOKENS_NAME", "main"]

DEFAULT_PORT = 8471
DEFAULT_HOST = "127.0.0.1"
TOKENS_NAME = "server-tokens.json"
EXIT_USAGE = 64
EXIT_PORTAL = 69


def note(text: str) -> None:
    print(f"portal: {text}", file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="portal server",
        description="Serve the control plane over HTTP (API v1, per-user tokens), so that the "
        "CLI and nodes of many machines share it through PORTAL_CONTROL_PLANE.",
    )
    parser.add_argument(
        "--db",
        metavar="DB",
        help="the store: sqlite (PORTAL_HOME/portal.db), a SQLite file's path, or a "
        "postgresql:// URL (default: PORTAL_CONTROL_DB, else sqlite). e.g. --db sqlite",
    )
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"the address to listen on (default {DEFAULT_HOST}). e.g. --host 10.0.0.5",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        metavar="P",
        help=f"default {DEFAULT_PORT}. e.g. --port 9000",
    )
    parser.add_argument(
        "--tokens",
        metavar="FILE",
        help=f"the tokens file (default PORTAL_HOME/{TOKENS_NAME}). e.g. --tokens ./tokens.json",
    )
    parser.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="serve https:// with this certificate (PEM; its chain after it), e.g. "
        "--tls-cert server.pem --tls-key server.key; clients that do not trust its CA set "
        "PORTAL_CONTROL_CA to the CA's certificate",
    )
    parser.add_argument(
        "--tls-key",
        metavar="FILE",
        help="the private key of --tls-cert (PEM). e.g. --tls-key server.key",
    )
    parser.add_argument(
        "--rate-limit",
        type=_rate,
        metavar="N",
        help="requests a second each user may send on average (bursts of ten times that); "
        "0 for no limit (default 100). e.g. --rate-limit 20",
    )
    parser.add_argument(
        "--auth-failures",
        type=_count,
        metavar="N",
        help="requests without a valid token each client address may send a minute (bursts of "
        "N), answered 429 past that; 0 for no limit (default 20). e.g. --auth-failures 5",
    )
    sub = parser.add_subparsers(dest="action", metavar="token")
    token = sub.add_parser("token", help="create, list or revoke users' tokens")
    verbs = token.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, text in (
        ("create", "a new token for USER, printed once (replaces USER's previous one)"),
        ("list", "the users who have a token"),
        ("revoke", "remove USER's token: the server refuses it from then on"),
    ):
        one = verbs.add_parser(verb, help=text)
        if verb != "list":
            one.add_argument("user", metavar="USER", help="the user's name. e.g. alice")
        # Its own dest: `portal server --tokens F token list` must keep F.
        one.add_argument(
            "--tokens",
            dest="token_file",
            metavar="FILE",
            help="the tokens file. e.g. --tokens ./tokens.json",
        )
        if verb == "create":
            one.add_argument(
                "--admin",
                action="store_true",
                help="an administrator's token: sees and changes every user's jobs (default: "
                "only the jobs this token created). e.g. --admin",
            )
            one.add_argument(
                "--job",
                metavar="JOB",
                help="a token for that one job of USER's (a node on another machine): it reads "
                "and writes that job only, and creates none. e.g. --job j-3f2a9c1b7e",
            )
            one.add_argument(
                "--db",
                dest="token_db",
                metavar="DB",
                help="the store the server serves, where --job's job and its owner are looked "
                "up (default: as `portal server`'s --db). e.g. --db postgresql://portal@db/portal",
            )
            one.add_argument(
                "--expires",
                metavar="DURATION",
                help="refused this long after now: 12h, 30d, 1d12h, or seconds (default: "
                "never). e.g. --expires 30d",
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = _parser().parse_args(argv)
    try:
        settings = Settings.load()
        path = getattr(options, "token_file", None) or options.tokens
        tokens = TokenFile(Path(path) if path else settings.home / TOKENS_NAME)
        if options.action == "token":
            db = getattr(options, "token_db", None) or options.db or settings.control_db
            return _token(options, tokens, db, settings)
        return serve(
            options.db or settings.control_db,
            settings,
            tokens,
            host=options.host,
            port=options.port,
            announce=note,
            tls=_tls(options.tls_cert, options.tls_key),
            rate_per_s=options.rate_limit,
            auth_failures_per_min=options.auth_failures,
        )
    except InvalidArgumentError as exc:
        note(f"{exc} [{exc.code}]")
        return EXIT_USAGE
    except PortalError as exc:
        note(f"{exc} [{exc.code}]")
        return EXIT_PORTAL
    except KeyboardInterrupt:
        return 130


def _token(options: argparse.Namespace, tokens: TokenFile, db: str, settings: Settings) -> int:
    if options.verb == "create":
        lifetime = None
        if options.expires is not None:
            try:
                lifetime = parse_duration(options.expires)
            except ValueError as why:
                raise InvalidArgumentError(
                    f"--expires {options.expires!r}: {why}, or days (30d)",
                    details={"expires": options.expires},
                ) from None
        role = "admin" if options.admin else "user"
        check_token_request(options.user, role=role, expires_in_s=lifetime, job=options.job)
        if options.job is not None:
            _check_job_is_users(options.job, options.user, db, settings, tokens)
        token, replaced = tokens.create(
            options.user, role=role, expires_in_s=lifetime, job=options.job
        )
        print(token, flush=True)
        note(
            f"{'an admin ' if options.admin else ''}token for {options.user}"
            + (f", for job {options.job} only," if options.job else "")
            + f" created in {tokens.path}"
            + (" (their previous token no longer works)" if replaced else "")
            + (f"; it expires in {options.expires}" if lifetime is not None else "")
            + "; it is shown only now: give it to them as PORTAL_TOKEN"
        )
    elif options.verb == "list":
        entries = tokens.entries()
        rows = [("USER", "ROLE", "CREATED", "EXPIRES")]
        rows += [
            (
                e.user,
                e.role,
                _when(e.created_at),
                "never" if e.expires_at is None else _when(e.expires_at),
            )
            for e in entries
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for row in rows:
            print(
                "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True))
                + "  "
                + row[3]
            )
    else:
        tokens.revoke(options.user)
        note(f"token of {options.user} revoked: the server refuses it from its next request")
    return 0


def _check_job_is_users(
    job: str, user: str, db: str, settings: Settings, tokens: TokenFile
) -> None:
    """Refuse a token for ``job`` unless ``user`` created it: the server would answer such a
    token "no job" on every route, so it is refused now, where the way out can be said. A job
    that does not exist yet is refused too (the job's id is known only once it is created, and
    a token made ahead could never be checked)."""
    where = _store_name(db, settings)
    found = _find_job(job, db, settings)
    named = recorded_named(tokens.path.with_name(OWNERS_NAME), job, user)
    if (found is None or found.id != job) and named:  # a name of the user's own (the server's)
        raise InvalidArgumentError(
            f"--job {job}: {job!r} is the name of job {named[0]} of {user}'s, and a job token is "
            f"held to a job's id: give --job {named[0]}",
            details={"job": job, "id": named[0]},
        )
    if found is None:
        raise InvalidArgumentError(
            f"--job {job}: no job {job!r} in the control plane at {where}: a job token is made "
            f"for a job that exists; create the job first (with {user}'s own token), then its "
            "token (or give --db the store the server serves)",
            details={"job": job, "store": where},
        )
    if found.id != job:
        raise InvalidArgumentError(
            f"--job {job}: {job!r} is the name of job {found.id}, and a job token is held to a "
            f"job's id: give --job {found.id}",
            details={"job": job, "id": found.id},
        )
    owner = recorded_owner(tokens.path.with_name(OWNERS_NAME), found.id)
    if owner is None:
        raise InvalidArgumentError(
            f"--job {job}: job {job} has no recorded owner (it was created before the server "
            "recorded owners, or not through the server), so it is an admin's: no user's job "
            "token can use it; an admin's token (`portal server token create USER --admin`) "
            "sees it",
            details={"job": job},
        )
    if owner != user:
        raise InvalidArgumentError(
            f"--job {job}: job {job} is {owner}'s, not {user}'s: a job token reads and writes "
            f"a job of its own user's only (the server would answer it 'no job' everywhere); "
            f"make it for the job's owner: `portal server token create {owner} --job {job}`",
            details={"job": job, "owner": owner, "user": user},
        )


def _find_job(ref: str, db: str, settings: Settings) -> Job | None:
    """The job ``ref`` names in the store ``db``, or None; a SQLite store that does not exist
    yet holds none, and looking does not make one."""
    if not _postgres(db):
        path = settings.home / "portal.db" if db == "sqlite" else Path(db)
        if not path.exists():
            return None
    store = open_database_store(db, settings)
    try:
        return store.get_job(ref)
    except JobNotFoundError:
        return None
    finally:
        store.close()


def _postgres(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


def _store_name(db: str, settings: Settings) -> str:
    """The store ``db`` names, as a person reads it (a URL without its password)."""
    if _postgres(db):
        from portal.control.postgres import redact_url

        return redact_url(db)
    return str(settings.home / "portal.db" if db == "sqlite" else db)


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error's exit status Portal's (64, as every usage error)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"portal server: {message} [INVALID_ARGUMENT]\n")


def _count(text: str) -> int:
    value = int(text) if text.isdigit() else -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of requests (0 or more), not {text!r}")
    return value


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected requests a second (0 or more), not {text!r}")
    return value


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _tls(cert: str | None, key: str | None) -> tuple[str, str] | None:
    """The certificate and key files to serve https:// with, checked now (a bad pair is told
    before the server starts, not at the first client's handshake)."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if cert else ("--tls-key", "--tls-cert")
        raise InvalidArgumentError(
            f"{given} was given without {missing}: https needs both the certificate and its "
            "private key (PEM files)"
        )
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as why:
        raise InvalidArgumentError(
            f"--tls-cert {cert} and --tls-key {key} cannot serve https: "
            f"{getattr(why, 'strerror', None) or why}; give a PEM certificate and the private "
            "key that matches it",
            details={"cert": cert, "key": key},
        ) from None
    return cert, key


def serve(
    db: str,
    settings: Settings,
    tokens: TokenFile,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    announce: Callable[[str], Any] = print,
    tls: tuple[str, str] | None = None,
    rate_per_s: float | None = None,
    auth_failures_per_min: int | None = None,
) -> int:
    """Serve the API over the store ``db`` names on ``host:port`` (0: any free port) until
    interrupted (Ctrl-C or SIGTERM)."""
    import uvicorn

    from portal.server.app import RATE_PER_S, build_app
    from portal.server.failures import AUTH_FAILURES_PER_MIN

    if not tokens.entries():
        raise InvalidArgumentError(
            f"no tokens in {tokens.path}: every request needs one; create the first with "
            f"`portal server token create USER --tokens {tokens.path}`",
            details={"file": str(tokens.path)},
        )
    listener = _listen(host, port)
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    store = open_database_store(db, settings)
    postgres = _postgres(db)
    where = _store_name(db, settings)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s portal-server %(levelname)s: %(message)s",
    )
    config = uvicorn.Config(
        build_app(
            store,
            tokens,
            store_kind="postgresql" if postgres else "sqlite",
            rate_per_s=RATE_PER_S if rate_per_s is None else rate_per_s,
            auth_failures_per_min=(
                AUTH_FAILURES_PER_MIN if auth_failures_per_min is None else auth_failures_per_min
            ),
        ),
        log_level="warning",
        access_log=False,
        lifespan="on",  # the app's: it logs bad-token refusals in aggregate, and at the end
        timeout_keep_alive=60,
        ssl_certfile=tls[0] if tls else None,
        ssl_keyfile=tls[1] if tls else None,
    )
    bound_host, bound_port = listener.getsockname()[:2]
    url_host = f"[{bound_host}]" if ":" in bound_host else bound_host
    if tls is None and not _loopback(bound_host):
        announce(
            "tokens travel in clear text over http://: serve https with --tls-cert and "
            "--tls-key (or put a TLS proxy in front of this server) before other machines use it"
        )
    scheme = "https" if tls else "http"
    announce(
        f"control plane on {scheme}://{url_host}:{bound_port} (API v1; store {where}; tokens "
        f"{tokens.path}; Ctrl-C stops it)"
    )
    try:
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        store.close()
    return 0


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _listen(host: str, port: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise InvalidArgumentError(
            f"--port {port} is not a TCP port: give one from 1 to 65535 (0 picks a free one)"
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets that say TCP, and
    # without it every answer waits ~40 ms (Nagle's algorithm against the client's delayed ACK).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidArgumentError(
            f"cannot listen on {host}:{port} ({exc.strerror}): another program (or another "
            f"server) has it, or the address is not this machine's; give another with "
            f"`portal server --host H --port P`"
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
