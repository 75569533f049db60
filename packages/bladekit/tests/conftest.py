from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def portal_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own PORTAL_HOME (runs, and the volume store under it)."""
    home = tmp_path / "portal-home"
    monkeypatch.setenv("PORTAL_HOME", str(home))
    monkeypatch.delenv("PORTAL_STORAGE_URL", raising=False)
    yield home
