"""Errors of the capture engine, each with a stable ``code`` and a message naming the way out."""

from __future__ import annotations

from typing import ClassVar

from portal.core.errors import CapturePortalError

__all__ = [
    "CheckpointCorruptError",
    "CheckpointFormatTooNewError",
    "CheckpointNoSpaceError",
    "CheckpointRestoreError",
    "CheckpointUnreadableError",
    "DebugBuildError",
    "LibraryMismatchError",
    "PythonVersionMismatchError",
    "UnsupportedInterpreterError",
]


class UnsupportedInterpreterError(CapturePortalError):
    """Not CPython 3.11-3.13 on a 64-bit machine: frames cannot be read or rebuilt."""

    code: ClassVar[str] = "CAPTURE_UNSUPPORTED_INTERPRETER"


class DebugBuildError(UnsupportedInterpreterError):
    """A debug build of CPython lays frames out differently."""

    code: ClassVar[str] = "CAPTURE_DEBUG_BUILD"


class PythonVersionMismatchError(CapturePortalError):
    """The checkpoint was written by another Python minor version (bytecode differs)."""

    code: ClassVar[str] = "CAPTURE_PYTHON_VERSION_MISMATCH"


class LibraryMismatchError(CapturePortalError):
    """The checkpoint was paused inside a library's code (a framework's training loop, say)
    that is installed differently here: its frames continue at positions in that code, so the
    same version must be installed. ``details``: ``module``, ``qualname``, ``distribution``,
    ``checkpoint_version``, ``installed_version``."""

    code: ClassVar[str] = "CAPTURE_LIBRARY_MISMATCH"


class CheckpointFormatTooNewError(CapturePortalError):
    """The checkpoint was written by a newer portal-capture."""

    code: ClassVar[str] = "CAPTURE_FORMAT_TOO_NEW"


class CheckpointUnreadableError(CapturePortalError):
    """The checkpoint file cannot be opened or read."""

    code: ClassVar[str] = "CAPTURE_CHECKPOINT_UNREADABLE"


class CheckpointCorruptError(CheckpointUnreadableError):
    """The checkpoint's bytes are not a whole, intact checkpoint (truncated, altered, not one)."""

    code: ClassVar[str] = "CAPTURE_CHECKPOINT_CORRUPT"


class CheckpointRestoreError(CapturePortalError):
    """The checkpoint reads whole, but loading the program's state from it failed: code of the
    program or of a library it uses raised while its objects were rebuilt (a library of another
    version than the one that wrote it, say). The checkpoint is left as it was."""

    code: ClassVar[str] = "CAPTURE_RESTORE_FAILED"


class CheckpointNoSpaceError(CapturePortalError, OSError):
    """The filesystem the checkpoint is written to has no room for it. Raised before a byte is
    written when the free space is known to be short (so the job's own output, often on the same
    disk, is not starved), or when the disk fills while writing (the partial file is removed at
    once). ``details``: ``path``, ``needed_bytes``, ``free_bytes``."""

    code: ClassVar[str] = "CAPTURE_NO_SPACE"
