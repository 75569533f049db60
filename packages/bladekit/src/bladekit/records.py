"""What a run writes about itself for readers in other processes (``bladekit.listing``).

Two small files per run folder, each replaced atomically (write a temp file, rename), so a reader
sees the old record or the new one and never a torn one:

- ``status.json`` (:class:`RunStatus`): written by the runner when the run is created and at each
  change of state (attempt started, preemption counted, run closed or failed);
- ``checkpoint.json`` (:class:`CheckpointRecord`): written by ``save_checkpoint`` inside a
  container (it finds the run folder in :data:`RUN_DIR_ENV`);
- ``attempts/N/resumed`` (empty, :data:`RESUMED_FILE`): made by ``load_checkpoint`` when attempt N
  (2 or later) loaded a checkpoint, so a listing counts the attempts that resumed from one.

Stored formats follow msgspec's evolution rules: new fields get defaults, nothing is reordered or
retyped, so an older bladekit's runs stay readable. This module imports only msgspec and the
standard library: listing runs must stay cheap.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final, Literal

import msgspec

__all__ = [
    "ATTEMPT_ENV",
    "CALLER_PID_ENV",
    "CHECKPOINT_FILE",
    "RESUMED_FILE",
    "RUN_DIR_ENV",
    "STATUS_FILE",
    "CheckpointRecord",
    "RunState",
    "RunStatus",
    "read_checkpoint",
    "read_status",
    "record_checkpoint",
    "record_resume",
    "resumed_attempts",
    "write_status",
]

#: Set by the runner in each container: the run folder ``save_checkpoint`` reports to.
RUN_DIR_ENV: Final = "BLADEKIT_RUN_DIR"
#: Set by the runner in each container: the attempt number.
ATTEMPT_ENV: Final = "BLADEKIT_ATTEMPT"
#: Set by the runner in each container: the caller's process id (the container dies with it).
CALLER_PID_ENV: Final = "BLADEKIT_CALLER_PID"
STATUS_FILE: Final = "status.json"
CHECKPOINT_FILE: Final = "checkpoint.json"
RESUMED_FILE: Final = "resumed"

RunState = Literal["running", "done", "failed", "preempted-out"]


class RunStatus(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A run's lifecycle as its runner last recorded it."""

    state: RunState = "running"
    submitted_at: float
    ended_at: float | None = None
    attempts: int = 0
    interruptions: int = 0
    #: The caller's process and host: a "running" run whose caller is gone ended unrecorded.
    owner_pid: int | None = None
    owner_host: str | None = None
    #: Why a failed run failed, in one sentence (stopped by its caller, out of preemptions).
    reason: str | None = None
    #: The method of the run's last call, for a class (``fit`` of ``Trainer``); None: a function.
    method: str | None = None


class CheckpointRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The last checkpoint a run's container saved."""

    path: str
    size: int
    saved_at: float
    attempt: int | None = None


_status_decoder = msgspec.json.Decoder(RunStatus)
_checkpoint_decoder = msgspec.json.Decoder(CheckpointRecord)
_encoder = msgspec.json.Encoder()


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_status(run_dir: Path, status: RunStatus) -> None:
    """Record ``status`` for ``run_dir`` (atomically)."""
    _replace(run_dir / STATUS_FILE, _encoder.encode(status))


def read_status(run_dir: Path) -> RunStatus | None:
    """The run's recorded status; None when missing or unreadable (a run being created)."""
    with contextlib.suppress(OSError, msgspec.DecodeError, msgspec.ValidationError):
        return _status_decoder.decode((run_dir / STATUS_FILE).read_bytes())
    return None


def record_checkpoint(path: Path, size: int, saved_at: float) -> None:
    """Tell this container's run that a checkpoint was saved; a no-op outside a container.

    Best effort: a listing's detail must never make a checkpoint fail.
    """
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return
    attempt = os.environ.get(ATTEMPT_ENV)
    record = CheckpointRecord(
        path=str(path),
        size=size,
        saved_at=saved_at,
        attempt=int(attempt) if attempt and attempt.isdigit() else None,
    )
    with contextlib.suppress(OSError):
        _replace(Path(run_dir) / CHECKPOINT_FILE, _encoder.encode(record))


def record_resume() -> None:
    """Tell this container's run that its attempt loaded a checkpoint; a no-op outside a
    container and in attempt 1 (which starts a run; it never resumes one). Best effort."""
    run_dir, attempt = os.environ.get(RUN_DIR_ENV), os.environ.get(ATTEMPT_ENV, "")
    if not run_dir or not attempt.isdigit() or int(attempt) < 2:
        return
    with contextlib.suppress(OSError):
        (Path(run_dir) / "attempts" / attempt / RESUMED_FILE).touch()


def resumed_attempts(run_dir: Path) -> int:
    """How many of the run's attempts loaded a checkpoint (see :func:`record_resume`)."""
    with contextlib.suppress(OSError):
        return sum(
            1
            for entry in (run_dir / "attempts").iterdir()
            if entry.name.isdigit() and int(entry.name) > 1 and (entry / RESUMED_FILE).exists()
        )
    return 0


def read_checkpoint(run_dir: Path) -> CheckpointRecord | None:
    """The run's last recorded checkpoint; None when none was saved (or it is unreadable)."""
    with contextlib.suppress(OSError, msgspec.DecodeError, msgspec.ValidationError):
        return _checkpoint_decoder.decode((run_dir / CHECKPOINT_FILE).read_bytes())
    return None
