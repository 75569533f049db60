"""Portal's checkpoint store: chunked, fingerprinted, encrypted per job, over fsspec.

The public API is small (see the package README)::

    from portal.storage import open_store

Names load on first use, so ``import portal.storage`` imports neither ``cryptography`` nor any
cloud library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "CheckpointStore": "portal.storage.store",
    "open_store": "portal.storage.store",
    "CheckpointWriter": "portal.storage.writer",
    "CheckpointReader": "portal.storage.reader",
    "Progress": "portal.storage.progress",
    "RetryPolicy": "portal.storage.retry",
    "GcReport": "portal.storage.gc",
    "FileKeyStore": "portal.storage.keys",
    "MemoryKeyStore": "portal.storage.keys",
    "resolve_key_store": "portal.storage.keys",
    "Volume": "portal.storage.volumes",
    "open_backend": "portal.storage.backend",
    "StorageError": "portal.storage.errors",
    "StorageUnavailableError": "portal.storage.errors",
    "CheckpointCorruptError": "portal.storage.errors",
    "CheckpointIncompleteError": "portal.storage.errors",
    "CheckpointNotFoundError": "portal.storage.errors",
    "CheckpointDeadlineError": "portal.storage.errors",
    "WrongKeyError": "portal.storage.errors",
    "MissingExtraError": "portal.storage.errors",
    "JobKeyMissingError": "portal.storage.errors",
    "JobKeyExistsError": "portal.storage.errors",
    "KeyStoreError": "portal.storage.errors",
    "VolumeNotFoundError": "portal.storage.errors",
    "VolumeCorruptError": "portal.storage.errors",
    "VolumeKeyMissingError": "portal.storage.errors",
}

__all__ = [
    "CheckpointCorruptError",
    "CheckpointDeadlineError",
    "CheckpointIncompleteError",
    "CheckpointNotFoundError",
    "CheckpointReader",
    "CheckpointStore",
    "CheckpointWriter",
    "FileKeyStore",
    "GcReport",
    "JobKeyExistsError",
    "JobKeyMissingError",
    "KeyStoreError",
    "MemoryKeyStore",
    "MissingExtraError",
    "Progress",
    "RetryPolicy",
    "StorageError",
    "StorageUnavailableError",
    "Volume",
    "VolumeCorruptError",
    "VolumeKeyMissingError",
    "VolumeNotFoundError",
    "WrongKeyError",
    "__version__",
    "open_backend",
    "open_store",
    "resolve_key_store",
]

if TYPE_CHECKING:
    from portal.storage.backend import open_backend
    from portal.storage.errors import (
        CheckpointCorruptError,
        CheckpointDeadlineError,
        CheckpointIncompleteError,
        CheckpointNotFoundError,
        JobKeyExistsError,
        JobKeyMissingError,
        KeyStoreError,
        MissingExtraError,
        StorageError,
        StorageUnavailableError,
        VolumeCorruptError,
        VolumeKeyMissingError,
        VolumeNotFoundError,
        WrongKeyError,
    )
    from portal.storage.gc import GcReport
    from portal.storage.keys import FileKeyStore, MemoryKeyStore, resolve_key_store
    from portal.storage.progress import Progress
    from portal.storage.reader import CheckpointReader
    from portal.storage.retry import RetryPolicy
    from portal.storage.store import CheckpointStore, open_store
    from portal.storage.volumes import Volume
    from portal.storage.writer import CheckpointWriter


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'portal.storage' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
