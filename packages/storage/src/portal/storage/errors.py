"""Errors of the checkpoint store, each with a stable ``code``.

Callers (the node, the CLI) branch on ``code``; the message names the thing (job, checkpoint,
chunk index, URL), what is wrong, and the way out. ``details`` carries the same facts for machines.
"""

from __future__ import annotations

from typing import ClassVar

from portal.core.errors import InvalidArgumentError, PortalError

__all__ = [
    "CheckpointCorruptError",
    "CheckpointDeadlineError",
    "CheckpointIncompleteError",
    "CheckpointNotFoundError",
    "InvalidStorageUrlError",
    "JobKeyExistsError",
    "JobKeyMissingError",
    "KeyStoreError",
    "MissingExtraError",
    "StorageError",
    "StorageUnavailableError",
    "VolumeCorruptError",
    "VolumeKeyMissingError",
    "VolumeNotFoundError",
    "WrongKeyError",
]


class StorageError(PortalError):
    """Base of every error the checkpoint store raises on purpose."""

    code: ClassVar[str] = "STORAGE_ERROR"


class StorageUnavailableError(StorageError):
    """The store could not be reached or refused a request, after retries where retrying helps."""

    code: ClassVar[str] = "STORAGE_UNAVAILABLE"


class MissingExtraError(StorageError):
    """A storage URL needs an optional dependency that is not installed (``portal-storage[s3]``)."""

    code: ClassVar[str] = "STORAGE_EXTRA_MISSING"


class InvalidStorageUrlError(InvalidArgumentError):
    """A storage URL, job id, checkpoint id or volume name cannot be used as given."""

    code: ClassVar[str] = "INVALID_STORAGE_URL"


class CheckpointNotFoundError(StorageError):
    """No such checkpoint (or the job has no complete checkpoint at all)."""

    code: ClassVar[str] = "CHECKPOINT_NOT_FOUND"


class CheckpointIncompleteError(StorageError):
    """The checkpoint has no manifest: its upload was cut short. Never resumable; kept for inspection."""

    code: ClassVar[str] = "CHECKPOINT_INCOMPLETE"


class CheckpointCorruptError(StorageError):
    """A fingerprint, authentication tag or checksum did not match: the bytes are not what was written."""

    code: ClassVar[str] = "CHECKPOINT_CORRUPT"


class WrongKeyError(StorageError):
    """The checkpoint was sealed with a different key than the one the key store holds for the job."""

    code: ClassVar[str] = "WRONG_KEY"


class CheckpointDeadlineError(StorageError):
    """The upload will not (or did not) finish before the deadline the writer was given."""

    code: ClassVar[str] = "CHECKPOINT_DEADLINE"


class KeyStoreError(StorageError):
    """The key store cannot be used as it is (unsafe permissions, unreadable or malformed key)."""

    code: ClassVar[str] = "KEY_STORE_ERROR"


class JobKeyMissingError(KeyStoreError, KeyError):
    """The key store holds no key for the job (also a ``KeyError``, as the KeyStore protocol says)."""

    code: ClassVar[str] = "JOB_KEY_MISSING"


class JobKeyExistsError(KeyStoreError):
    """A key was asked to be created for a job that already has one (keys are never replaced)."""

    code: ClassVar[str] = "JOB_KEY_EXISTS"


class VolumeNotFoundError(StorageError):
    """``Volume.from_name`` named a volume that does not exist and was not asked to create it."""

    code: ClassVar[str] = "VOLUME_NOT_FOUND"


class VolumeKeyMissingError(StorageError):
    """This machine's key store holds no key for a volume whose manifest it must verify."""

    code: ClassVar[str] = "VOLUME_KEY_MISSING"


class VolumeCorruptError(StorageError):
    """A volume file's bytes in the store do not match the hash its manifest records."""

    code: ClassVar[str] = "VOLUME_CORRUPT"
