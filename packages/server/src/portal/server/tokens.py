"""Per-user tokens: ``portal server token create USER`` prints one once; the file keeps its hash.

The tokens file (default ``PORTAL_HOME/server-tokens.json``, mode 0600) holds, per user, the
SHA-256 of the token and when it was made: a copy of the file lets no one in. A token is 32
random bytes (``secrets``), so a plain hash is enough (nothing to guess, nothing to salt against).
The running server re-reads the file when it changes, so a revoke takes effect at once.
One token per user: creating another replaces the first.

A token has a role: ``user`` (the default) sees and changes only the jobs it created; ``admin``
(``token create USER --admin``) every job. It may expire (``--expires 30d``): from then on the
server refuses it, saying so. A token may also be held to one job (``--job JOB``: what a node on
another machine needs, and nothing more): it reads and writes that job of its user's only, and
creates none. A user's job tokens live beside their own token; each (user, job) has one.
``portal server token create USER --job JOB`` makes one only for a job USER created (see
:mod:`portal.server.cli`): a token for another's job, or for none, could do nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec

from portal.core.domain import is_job_id
from portal.core.errors import InvalidArgumentError

__all__ = [
    "ROLES",
    "TOKEN_PREFIX",
    "Principal",
    "TokenEntry",
    "TokenFile",
    "check_token_request",
    "token_hash",
]

TOKEN_PREFIX = "ptk_"
_USER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,62}$")
_FORMAT = 1
#: ``user``: its own jobs only; ``admin``: every job.
ROLES = ("user", "admin")


class TokenEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    user: str
    sha256: str
    created_at: float
    role: str = "user"
    #: Unix time after which the server refuses the token (None: never).
    expires_at: float | None = None
    #: The one job this token may use (None: every job its role allows).
    job: str | None = None


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """Who a request's token speaks for."""

    user: str
    role: str = "user"
    #: The token is known but past its expiry: refused, with that reason.
    expired_at: float | None = None
    #: The one job the token may use (None: every job its role allows).
    job: str | None = None

    @property
    def admin(self) -> bool:
        return self.role == "admin"


class _Stored(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    format: int = _FORMAT
    tokens: list[TokenEntry] = []


_DECODER = msgspec.json.Decoder(_Stored)
_ENCODER = msgspec.json.Encoder()


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class TokenFile:
    """The tokens of one server: create, list and revoke (the CLI), and look up (the server)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime) last read
        self._by_hash: dict[str, TokenEntry] = {}

    # --- the server's side --------------------------------------------------------------------

    def principal_of(self, token: str, *, now: float | None = None) -> Principal | None:
        """Whom ``token`` speaks for, or None (unknown, revoked, or no tokens file); an expired
        token's principal says when it expired."""
        with self._lock:
            self._refresh()
            entry = self._by_hash.get(token_hash(token))
        if entry is None:
            return None
        now = time.time() if now is None else now
        expired = (
            entry.expires_at if entry.expires_at is not None and now >= entry.expires_at else None
        )
        return Principal(user=entry.user, role=entry.role, expired_at=expired, job=entry.job)

    def user_of(self, token: str) -> str | None:
        """Whose valid ``token`` this is, or None (unknown, revoked, expired, or no file)."""
        principal = self.principal_of(token)
        return principal.user if principal is not None and principal.expired_at is None else None

    def _refresh(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._seen, self._by_hash = None, {}
            return
        seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        if seen != self._seen:
            self._by_hash = {e.sha256: e for e in self.entries()}
            self._seen = seen

    # --- the administrator's side -------------------------------------------------------------

    def entries(self) -> list[TokenEntry]:
        """Every user's token entry (hashes only), oldest first."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        try:
            stored = _DECODER.decode(data)
        except msgspec.DecodeError as why:
            raise InvalidArgumentError(
                f"the tokens file {self.path} is not one Portal wrote ({why}): fix it, or move it "
                "away and create the tokens again with `portal server token create USER`",
                details={"file": str(self.path)},
            ) from None
        if stored.format != _FORMAT:
            raise InvalidArgumentError(
                f"the tokens file {self.path} has format {stored.format}, not {_FORMAT}: it was "
                "written by another Portal version; use that version, or create the tokens again",
                details={"file": str(self.path), "format": stored.format},
            )
        return list(stored.tokens)

    def create(
        self,
        user: str,
        *,
        now: float | None = None,
        role: str = "user",
        expires_in_s: float | None = None,
        job: str | None = None,
    ) -> tuple[str, bool]:
        """A new token for ``user`` (returned once, never stored) and whether it replaced one.
        ``role``: ``user`` or ``admin``; ``expires_in_s``: refused that long after now; ``job``:
        held to that one job of the user's (it replaces only that job's earlier token)."""
        check_token_request(user, role=role, expires_in_s=expires_in_s, job=job)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        created = time.time() if now is None else now
        entry = TokenEntry(
            user=user,
            sha256=token_hash(token),
            created_at=created,
            role=role,
            expires_at=None if expires_in_s is None else created + expires_in_s,
            job=job,
        )
        with self._editing() as entries:
            same = [e for e in entries if e.user == user and e.job == job]
            entries[:] = [e for e in entries if e not in same] + [entry]
        return token, bool(same)

    def revoke(self, user: str) -> None:
        """Remove every token of ``user`` (their job tokens too): the server refuses them from
        its next request on."""
        with self._editing() as entries:
            if not any(e.user == user for e in entries):
                raise InvalidArgumentError(
                    f"no token for user {user!r} in {self.path}: `portal server token list` "
                    "shows who has one",
                    details={"user": user, "file": str(self.path)},
                )
            entries[:] = [e for e in entries if e.user != user]

    @contextlib.contextmanager
    def _editing(self) -> Iterator[list[TokenEntry]]:
        """The entries, under a lock against another ``token`` command, written back atomically
        (a new file renamed over the old: the server never reads half a file)."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600), "rb+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            entries = self.entries()
            yield entries
            fresh = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(fd, "wb") as out:
                out.write(_ENCODER.encode(_Stored(tokens=entries)) + b"\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(fresh, self.path)


def check_token_request(
    user: str, *, role: str = "user", expires_in_s: float | None = None, job: str | None = None
) -> None:
    """Refuse a token :meth:`TokenFile.create` would not make, before anything is looked up
    for it (the CLI checks the job's owner only for a request that is otherwise sound)."""
    _check_user(user)
    if job is not None and (not is_job_id(job) or role != "user"):
        raise InvalidArgumentError(
            f"--job {job!r}: a job token is a user's, for one job id (j-...)"
            + (" and cannot be an admin's" if role != "user" else ""),
            details={"job": job},
        )
    if role not in ROLES:
        raise InvalidArgumentError(
            f"role {role!r} is not one of {', '.join(ROLES)}", details={"role": role}
        )
    if expires_in_s is not None and not 0 < expires_in_s < float("inf"):
        raise InvalidArgumentError(
            f"a token's lifetime must be above 0 s, not {expires_in_s!r}",
            details={"expires_in_s": expires_in_s},
        )


def _check_user(user: str) -> None:
    if not _USER.fullmatch(user):
        raise InvalidArgumentError(
            f"user name {user!r} is not valid: use 1-63 letters, digits, '.', '_', '@' or '-', "
            "starting with a letter or digit",
            details={"user": user},
        )
