"""The contract of a key store (the ``portal_key_store`` hook: a KMS, a vault, a file store).

A job's checkpoints are encrypted with its own key, and the key store is the only place it
lives: a store that loses a key, hands out another job's, or replaces one loses every checkpoint
made with it. These tests hold what the checkpoint store relies on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from portal.core.specs import KeyStore
from portal.testing.contracts import _Contract

__all__ = ["KeyStoreContract"]


class KeyStoreContract(_Contract):
    """What a key store must do. Implement :meth:`make_key_store` (an empty store), and
    :meth:`reopen` where keys outlive the object (a file store, a KMS)."""

    #: Bytes in a job key (AES-256-GCM's key, as portal-storage's ``crypto.KEY_SIZE``).
    key_size: int = 32

    def make_key_store(self) -> KeyStore:
        raise NotImplementedError

    def reopen(self, store: KeyStore) -> KeyStore:
        """The same keys through a new object, as another process would open them. The default
        returns ``store`` itself: a store that lives in one process only."""
        return store

    @pytest.fixture
    def store(self) -> Iterator[KeyStore]:
        yield self.make_key_store()

    def test_is_a_key_store(self, store: KeyStore) -> None:
        assert isinstance(store, KeyStore), f"{type(store).__name__} has no create/get methods"

    def test_create_makes_a_random_key_of_the_right_size(self, store: KeyStore) -> None:
        first, second = store.create("job-a"), store.create("job-b")
        assert isinstance(first, bytes) and len(first) == self.key_size
        assert isinstance(second, bytes) and len(second) == self.key_size
        assert first != second, "two jobs were given one key"
        assert first != bytes(self.key_size), "a key of zeros is no key"

    def test_get_returns_the_key_created(self, store: KeyStore) -> None:
        key = store.create("job-a")
        assert store.get("job-a") == key
        assert self.reopen(store).get("job-a") == key, "the key did not outlive its object"

    def test_keys_are_kept_apart(self, store: KeyStore) -> None:
        made = {f"job-{i}": store.create(f"job-{i}") for i in range(20)}
        again = self.reopen(store)
        assert {job: again.get(job) for job in made} == made

    def test_a_job_without_a_key_raises_key_error(self, store: KeyStore) -> None:
        """``KeyError`` (a subclass of it, with a message that says where it looked): the
        checkpoint store turns it into "this job's checkpoints cannot be read here"."""
        with pytest.raises(KeyError):
            store.get("job-never-made")
        store.create("job-a")
        with pytest.raises(KeyError):
            store.get("job-b")

    def test_a_key_is_never_replaced(self, store: KeyStore) -> None:
        """Its checkpoints could no longer be read: a second create is refused, the first key
        stays."""
        key = store.create("job-a")
        with pytest.raises(Exception) as refused:
            store.create("job-a")
        assert not isinstance(refused.value, AssertionError)
        assert store.get("job-a") == key
        assert self.reopen(store).get("job-a") == key

    def test_concurrent_creates_make_one_key(self, store: KeyStore) -> None:
        """Two nodes creating one job's key at once: one wins, the other is refused, and every
        reader sees the winner's key."""
        won: list[bytes] = []
        refused: list[BaseException] = []
        start = threading.Barrier(8)

        def create() -> None:
            start.wait()
            try:
                won.append(store.create("job-raced"))
            except Exception as exc:
                refused.append(exc)

        threads = [threading.Thread(target=create) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(won) == 1, f"{len(won)} creates of one job's key succeeded"
        assert len(refused) == 7
        assert store.get("job-raced") == won[0]
