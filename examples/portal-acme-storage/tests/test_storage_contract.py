"""The example plugin passes Portal's storage-backend contract."""

from __future__ import annotations

from pathlib import Path

import pytest
from portal_acme_storage.plugin import AcmeStorage

from portal.core.specs import StorageBackend
from portal.testing import StorageBackendContract


class TestAcmeStorage(StorageBackendContract):
    @pytest.fixture(autouse=True)
    def _root(self, tmp_path: Path) -> None:
        self.root = tmp_path

    def make_backend(self) -> StorageBackend:
        return AcmeStorage("acme://bucket/jobs", {"root": str(self.root)})
