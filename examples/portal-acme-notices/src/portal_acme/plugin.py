"""Acme notices: the deadline appears in a file when the machine is about to be taken."""

from __future__ import annotations

from pathlib import Path

from portal.core.domain import Notice, NoticeKind
from portal.core.hookspecs import hookimpl
from portal.core.specs import NoticeSourceContext, NoticeSourceSpec


class AcmeNotices:
    name = "acme"

    def __init__(self, context: NoticeSourceContext) -> None:
        self.path = Path(context.environ.get("ACME_PREEMPT_FILE", "/run/acme/preempt"))
        self.clock = context.clock
        self.current: Notice | None = None

    def detect(self) -> bool:
        return self.path.parent.is_dir()

    def poll(self, timeout_s: float) -> list[Notice]:
        """What changed, waiting up to ``timeout_s`` for a change (the file is read again every
        50 ms meanwhile): returning at once with nothing would make the node's loop spin."""
        end = self.clock.monotonic() + timeout_s
        while True:
            changes = self._changes()
            if changes or self.clock.monotonic() >= end:
                return changes
            self.clock.sleep(0.05)

    def _changes(self) -> list[Notice]:
        try:
            deadline = float(self.path.read_text().strip())
        except (FileNotFoundError, ValueError):
            deadline = None
        if deadline is None and self.current is not None:  # the notice was withdrawn
            withdrawn, self.current = self.current.cancel(), None
            return [withdrawn]
        if deadline is None or (self.current and self.current.deadline == deadline):
            return []
        self.current = Notice(
            id=Notice.derive_id("acme", deadline),
            source=self.name,
            provider="acme",
            kind=NoticeKind.PREEMPTION,
            deadline=deadline,
            seen_at=self.clock.now(),
        )
        return [self.current]

    def close(self) -> None:
        self.current = None


@hookimpl
def portal_notice_sources() -> list[NoticeSourceSpec]:
    return [NoticeSourceSpec(name="acme", provider="acme", factory=AcmeNotices)]
