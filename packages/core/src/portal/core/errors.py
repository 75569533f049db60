"""Errors with stable codes.

Every error Portal raises on purpose is a :class:`PortalError` with a machine-readable ``code``
that never changes between releases, and a message that names the thing, what is wrong and the
way out. Callers (the CLI, the node, schedulers embedding the core) branch on ``code``, never on
the message text.

:class:`RunError` and its subclasses describe what happened to a *run* (infrastructure-level
outcomes such as a preemption). They are never raised for an exception of the user's own code:
that one propagates unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "CapturePortalError",
    "InvalidArgumentError",
    "InvalidSettingError",
    "PluginError",
    "PortalError",
    "PreemptedError",
    "RunError",
    "UnsafeFolderError",
]


class PortalError(Exception):
    """Base of every error Portal raises on purpose.

    ``code`` is stable; ``details`` is a structured payload (JSON-friendly) for machines.
    """

    code: ClassVar[str] = "PORTAL_ERROR"

    def __init__(self, message: str, *, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form, as the CLI's ``--json`` output and events carry it."""
        return {"code": self.code, "message": self.message, "details": self.details}


class InvalidArgumentError(PortalError, ValueError):
    """A caller passed a value Portal cannot accept (validated client-side)."""

    code: ClassVar[str] = "INVALID_ARGUMENT"


class InvalidSettingError(InvalidArgumentError):
    """A setting (file, environment variable or flag) has a value Portal cannot accept."""

    code: ClassVar[str] = "INVALID_SETTING"


class UnsafeFolderError(PortalError):
    """A folder Portal keeps private (sockets, lock records) is not this user's alone."""

    code: ClassVar[str] = "UNSAFE_FOLDER"


class PluginError(PortalError):
    """A plugin could not be loaded or registered (duplicate name, import failure, bad hook)."""

    code: ClassVar[str] = "PLUGIN_ERROR"


class CapturePortalError(PortalError):
    """Base for capture-engine errors (refused interpreter, unreadable checkpoint, ...)."""

    code: ClassVar[str] = "CAPTURE_ERROR"


class RunError(PortalError):
    """An infrastructure-level outcome of a run (never an exception of the user's code).

    Matches the SDK reference: ``RunError(code, run_id, details)``. ``code`` defaults to the class'
    stable code; ``run_id`` is the run's id when known.
    """

    code: ClassVar[str] = "RUN_ERROR"

    def __init__(
        self,
        message: str = "",
        *,
        run_id: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message or self._default_message(run_id), details=details)
        self.run_id = run_id

    @classmethod
    def _default_message(cls, run_id: str | None) -> str:
        return f"run {run_id} ended with {cls.code}" if run_id else f"run ended with {cls.code}"

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["run_id"] = self.run_id
        return data


class PreemptedError(RunError):
    """A run or call was preempted (its machine reclaimed, or a higher-priority job took it)."""

    code: ClassVar[str] = "PREEMPTED"

    @classmethod
    def _default_message(cls, run_id: str | None) -> str:
        what = f"run {run_id}" if run_id else "the run"
        return f"{what} was preempted: its machine was reclaimed by the provider"
