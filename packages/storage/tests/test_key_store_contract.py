"""Portal's own key stores pass the key-store contract a KMS or vault plugin must pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from portal.core.specs import KeyStore
from portal.storage import FileKeyStore, MemoryKeyStore
from portal.testing import KeyStoreContract


class TestFileKeyStore(KeyStoreContract):
    @pytest.fixture(autouse=True)
    def _home(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"

    def make_key_store(self) -> KeyStore:
        return FileKeyStore(self.home)

    def reopen(self, store: KeyStore) -> KeyStore:
        return FileKeyStore(self.home)


class TestMemoryKeyStore(KeyStoreContract):
    def make_key_store(self) -> KeyStore:
        return MemoryKeyStore()


class _Forgetful(MemoryKeyStore):
    """A store that replaces a key on a second create: the contract must catch it."""

    def create(self, job_id: str) -> bytes:
        self._keys.pop(job_id, None)
        return super().create(job_id)


def test_the_contract_catches_a_store_that_replaces_a_key() -> None:
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        KeyStoreContract().test_a_key_is_never_replaced(_Forgetful())
