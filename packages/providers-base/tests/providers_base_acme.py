"""The README's example provider, loaded from the README itself, and a fake of its service.

The example is the documentation; loading it from there keeps it true: if it stops working, the
base's own tests fail.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

from portal.providers.base.testing import FakeHTTPServer, RecordedRequest, Reply

README = Path(__file__).resolve().parents[1] / "README.md"
PREEMPT_PATH = "/v1/preempt"


def readme_blocks() -> list[str]:
    """The README's Python examples, in order: the notice source, then its plugin module."""
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def load_example() -> types.ModuleType:
    """The README's source as the module ``portal_acme.notices`` (as its plugin names it)."""
    if "portal_acme.notices" not in sys.modules:
        package = types.ModuleType("portal_acme")
        package.__path__ = []
        notices = types.ModuleType("portal_acme.notices")
        exec(compile(readme_blocks()[0], str(README), "exec"), notices.__dict__)
        package.notices = notices  # type: ignore[attr-defined]
        sys.modules["portal_acme"] = package
        sys.modules["portal_acme.notices"] = notices
    return sys.modules["portal_acme.notices"]


class FakeAcme(FakeHTTPServer):
    """Acme's metadata service: ``GET /v1/preempt`` is the stop time, 404 while none."""

    def __init__(self, *, skew_s: float = 0.0) -> None:
        super().__init__()
        self.skew_s = skew_s
        self.stop_at: float | None = None

    def now(self) -> float:
        return super().now() + self.skew_s

    def preempt(self, in_seconds: float) -> float:
        with self.lock:
            self.stop_at = self.now() + in_seconds
            return self.stop_at

    def respond(self, request: RecordedRequest) -> Reply:
        with self.lock:
            stop_at = self.stop_at
        if request.path != PREEMPT_PATH or stop_at is None:
            return Reply(404)
        return Reply(200, repr(stop_at).encode())
