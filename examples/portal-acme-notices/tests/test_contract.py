"""The example plugin passes Portal's notice-source contract."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from portal_acme.plugin import AcmeNotices

from portal.core.specs import NoticeSource, NoticeSourceContext
from portal.testing import NoticeSourceContract


class TestAcmeNotices(NoticeSourceContract):
    @pytest.fixture(autouse=True)
    def _machine(self, tmp_path: Path) -> None:
        self.file = tmp_path / "preempt"

    def make_source(self) -> NoticeSource:
        return AcmeNotices(NoticeSourceContext(environ={"ACME_PREEMPT_FILE": str(self.file)}))

    def announce(self, source: NoticeSource, seconds: float) -> None:
        self.file.write_text(str(time.time() + seconds))

    def withdraw(self, source: NoticeSource) -> bool:
        self.file.unlink()
        return True
