"""Fixtures for portal-storage: stores on every backend, real emulators, keys.

Emulators start once per session, only when a test asks for them, and stop at the end.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import storage_emulators as emu

emu.apply_safe_env()

from portal.storage import CheckpointStore, MemoryKeyStore  # noqa: E402

BACKENDS = ("file", "memory", "s3", "gcs", "azure")


@pytest.fixture(autouse=True)
def _own_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test has its own PORTAL_HOME: a volume's key is made there, never in ~/.portal."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("PORTAL_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def moto() -> Iterator[emu.Emulator]:
    service = emu.start_moto()
    yield service
    service.stop()


@pytest.fixture(scope="session")
def gcs() -> Iterator[emu.Emulator]:
    service = emu.start_gcs()
    yield service
    service.stop()


@pytest.fixture(scope="session")
def azurite() -> Iterator[emu.Emulator]:
    service = emu.start_azurite()
    yield service
    service.stop()


StoreTarget = tuple[str, Mapping[str, Any]]


@pytest.fixture
def target_for(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], StoreTarget]:
    """``target_for("s3")`` -> (fresh empty URL, options) on that backend."""

    def make(kind: str) -> StoreTarget:
        unique = uuid.uuid4().hex[:12]
        if kind == "file":
            return str(tmp_path / f"store-{unique}"), {}
        if kind == "memory":
            return f"memory://portal-test-{unique}", {}
        service: emu.Emulator = request.getfixturevalue(
            {"s3": "moto", "gcs": "gcs", "azure": "azurite"}[kind]
        )
        return f"{service.scheme}://{service.container}/{unique}", service.options

    return make


@pytest.fixture
def key_store() -> MemoryKeyStore:
    return MemoryKeyStore()


@pytest.fixture
def make_store(
    target_for: Callable[[str], StoreTarget], key_store: MemoryKeyStore
) -> Callable[..., CheckpointStore]:
    def make(kind: str = "memory", **kwargs: Any) -> CheckpointStore:
        url, options = target_for(kind)
        return CheckpointStore(url, key_store, options=options, **kwargs)

    return make
