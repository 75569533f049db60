"""The local notice source: notices for one machine, delivered through a directory.

``portal notice JOB`` (or any program) calls :func:`deliver_notice`, which writes one JSON file per
notice into the job's notice directory, atomically. The node's :class:`LocalNoticeSource` polls that
directory: a new file is a new notice, a removed file is a withdrawn one. A directory is the
simplest channel that survives a restart of either side and needs no server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import Notice, NoticeKind
from portal.core.errors import InvalidArgumentError, PortalError
from portal.core.hookspecs import hookimpl
from portal.core.settings import seconds as notice_length
from portal.core.specs import NoticeSourceContext, NoticeSourceSpec

__all__ = [
    "NOTICE_DIR_ENV",
    "LocalNoticeSource",
    "deliver_notice",
    "withdraw_all",
    "withdraw_notice",
]

NOTICE_DIR_ENV = "PORTAL_NOTICE_DIR"
SOURCE_NAME = "local"
log = logging.getLogger("portal.notices.local")
DEFAULT_NOTICE_S = 120.0
#: What a notice file that cannot be read is renamed with (kept to be looked at, never read).
UNREADABLE_SUFFIX = ".unreadable"
#: How often a poll reads the directory while it waits (the latency of a local notice).
_READ_EVERY_S = 0.1


def deliver_notice(
    directory: str | os.PathLike[str],
    *,
    seconds: float = DEFAULT_NOTICE_S,
    kind: NoticeKind = NoticeKind.PREEMPTION,
    clock: Clock = SYSTEM_CLOCK,
    reason: str = "delivered by portal notice",
) -> Notice:
    """Deliver a notice that the machine goes in ``seconds``; returns it."""
    try:
        seconds = notice_length(seconds)
    except ValueError as why:
        raise InvalidArgumentError(
            f"notice length {seconds!r} s is not valid: {why} (e.g. --seconds 120)",
            details={"seconds": str(seconds)},
        ) from None
    now = clock.now()
    notice = Notice(
        id=f"local-{uuid.uuid4().hex[:12]}",
        source=SOURCE_NAME,
        provider="local",
        kind=kind,
        deadline=now + seconds,
        seen_at=now,
        raw={"reason": reason, "seconds": seconds},
    )
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    body = json.dumps(
        {
            "id": notice.id,
            "kind": str(notice.kind),
            "deadline": notice.deadline,
            "issued_at": now,
            "raw": dict(notice.raw),
        }
    )
    tmp = path / f".{notice.id}.tmp"
    tmp.write_text(body, encoding="utf-8")
    os.replace(tmp, path / f"{notice.id}.json")
    return notice


def withdraw_notice(directory: str | os.PathLike[str], notice_id: str) -> bool:
    """Withdraw a delivered notice; False if there was none by that id."""
    try:
        (Path(directory) / f"{notice_id}.json").unlink()
    except FileNotFoundError:
        return False
    return True


def withdraw_all(directory: str | os.PathLike[str]) -> list[str]:
    """Withdraw every notice delivered to ``directory``; their ids. For the end of an attempt:
    the notices were for its machine, and a later attempt must not take them as its own."""
    withdrawn = []
    for path in sorted(Path(directory).glob("*.json")):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            withdrawn.append(path.stem)
    return withdrawn


class LocalNoticeSource:
    """Polls a notice directory; reports new notice files and removed ones (withdrawals)."""

    name = SOURCE_NAME

    def __init__(
        self,
        directory: str | os.PathLike[str] | None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        report: Callable[[str], None] | None = None,
    ):
        self.directory = Path(directory) if directory else None
        self.clock = clock
        #: Where a notice file that cannot be read is told of (the job's events in a node).
        self.report = report or log.warning
        self._reported: dict[str, Notice] = {}
        self._bad: set[str] = set()

    @classmethod
    def from_context(cls, context: NoticeSourceContext) -> LocalNoticeSource:
        directory = context.settings.get("local_notice_dir") or context.environ.get(NOTICE_DIR_ENV)
        return cls(directory, clock=context.clock, report=context.report)

    def detect(self) -> bool:
        return self.directory is not None

    def poll(self, timeout_s: float = 0.0) -> Sequence[Notice]:
        """The changes in the directory, waiting up to ``timeout_s`` for one: there is
        nothing to block on but the directory itself, so it is read every 0.1 s meanwhile."""
        if self.directory is None:
            return []
        end = self.clock.monotonic() + max(0.0, timeout_s)
        while True:
            changes = self._changes()
            left = end - self.clock.monotonic()
            if changes or left <= 0:
                return changes
            self.clock.sleep(min(left, _READ_EVERY_S))

    def _changes(self) -> list[Notice]:
        current = self._read_all()
        changes: list[Notice] = [n for nid, n in current.items() if nid not in self._reported]
        for nid, notice in list(self._reported.items()):
            if nid not in current:
                changes.append(notice.cancel())
                del self._reported[nid]
        self._reported.update(current)
        return changes

    def _read_all(self) -> dict[str, Notice]:
        assert self.directory is not None
        try:
            entries = sorted(self.directory.glob("*.json"))
        except OSError as exc:
            raise PortalError(f"cannot read notice directory {self.directory}: {exc}") from exc
        found: dict[str, Notice] = {}
        for entry in entries:
            if entry.stem in self._reported:
                found[entry.stem] = self._reported[entry.stem]
                continue
            try:
                data = json.loads(entry.read_text(encoding="utf-8"))
                notice = Notice(
                    id=str(data["id"]),
                    source=SOURCE_NAME,
                    provider="local",
                    kind=NoticeKind(data.get("kind", "preemption")),
                    deadline=float(data["deadline"]),
                    seen_at=self.clock.now(),
                    raw=data.get("raw", {}),
                )
            except FileNotFoundError:
                continue  # withdrawn between listing and reading
            except (ValueError, KeyError, TypeError, OverflowError) as exc:
                # Set aside, never read again (by this node or a later attempt's): a notice
                # that cannot be read must not come back at every resume.
                kept = entry.with_name(entry.name + UNREADABLE_SUFFIX)
                with contextlib.suppress(OSError):
                    os.replace(entry, kept)
                if entry.name not in self._bad:  # once per file
                    self._bad.add(entry.name)
                    self.report(
                        f"ignoring notice file {entry}, which cannot be read (kept as "
                        f"{kept.name}): {exc}. A notice is delivered by `portal notice JOB "
                        "--seconds S`"
                    )
                continue
            found[notice.id] = notice
        return found

    def close(self) -> None:
        self._reported.clear()


@hookimpl(trylast=True)
def portal_notice_sources() -> list[NoticeSourceSpec]:
    return [
        NoticeSourceSpec(
            name=SOURCE_NAME,
            provider="local",
            factory=LocalNoticeSource.from_context,
            description="notices for one machine, delivered by `portal notice JOB`",
        )
    ]
