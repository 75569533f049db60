"""``portal server``: serve the control plane over HTTP, and manage its users' tokens.

::

    portal server [--db sqlite|PATH|postgresql://...] [--host 127.0.0.1] [--port 8471]
                  [--tokens FILE] [--tls-cert FILE --tls-key FILE]
    portal server token create USER [--tokens FILE]   # prints the new token, once
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
from portal.core.errors import InvalidArgumentError, PortalError
from portal.core.settings import Settings, parse_duration
from portal.server.tokens import TokenFile

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
            return _token(options, tokens)
        return serve(
            options.db or settings.control_db,
            settings,
            tokens,
            host=options.host,
            port=options.port,
            announce=note,
            tls=_tls(options.tls_cert, options.tls_key),
            rate_per_s=options.rate_limit,
        )
    except InvalidArgumentError as exc:
        note(f"{exc} [{exc.code}]")
        return EXIT_USAGE
    except PortalError as exc:
        note(f"{exc} [{exc.code}]")
        return EXIT_PORTAL
    except KeyboardInterrupt:
        return 130


def _token(options: argparse.Namespace, tokens: TokenFile) -> int:
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


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error's exit status Portal's (64, as every usage error)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"portal server: {message} [INVALID_ARGUMENT]\n")


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
) -> int:
    """Serve the API over the store ``db`` names on ``host:port`` (0: any free port) until
    interrupted (Ctrl-C or SIGTERM)."""
    import uvicorn

    from portal.control.postgres import redact_url
    from portal.server.app import RATE_PER_S, build_app

    if not tokens.entries():
        raise InvalidArgumentError(
            f"no tokens in {tokens.path}: every request needs one; create the first with "
            f"`portal server token create USER --tokens {tokens.path}`",
            details={"file": str(tokens.path)},
        )
    listener = _listen(host, port)
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    store = open_database_store(db, settings)
    postgres = db.startswith(("postgresql://", "postgres://"))
    where = (
        redact_url(db) if postgres else str(settings.home / "portal.db" if db == "sqlite" else db)
    )
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
        ),
        log_level="warning",
        access_log=False,
        lifespan="off",
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
