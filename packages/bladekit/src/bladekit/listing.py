"""``runs(home)``: every bladekit run under ``home/bladekit/runs``, read from its files alone.

For listings outside the caller's process (``portal jobs`` through a plugin, a shell, a
dashboard): it reads the files each run keeps (``request.json``, ``status.json``,
``checkpoint.json``, the attempt folders; see :mod:`bladekit.records`), imports nothing of the
runner or of Portal's CLI, and costs a few small reads per run.

It tolerates runs being written while it reads: a folder without a readable ``request.json`` is
a run still being created and is left out; a missing or torn ``status.json`` (a run made by an
older bladekit) is described from its attempt folders. A run recorded as running whose caller
process is gone on this machine ended without saying so, and is shown as failed.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

import attrs
import msgspec

from bladekit.records import RunState, read_checkpoint, read_status, resumed_attempts

__all__ = ["RunRow", "run_row", "runs"]


@attrs.frozen(kw_only=True)
class RunRow:
    """One bladekit run, as its files describe it."""

    run_id: str
    app: str
    #: The function's or class's qualified name (``train``, ``Trainer``).
    function: str
    #: For a class, the method of the run's last call (``fit``); None for a function.
    method: str | None = None
    state: RunState
    #: Epoch seconds.
    submitted_at: float
    ended_at: float | None
    attempts: int
    interruptions: int
    #: Attempts that loaded a checkpoint (``load_checkpoint``) to resume; attempt 1 never does.
    resumed: int = 0
    #: The last checkpoint ``save_checkpoint`` wrote in one of the run's containers, if any.
    checkpoint_bytes: int | None = None
    checkpoint_at: float | None = None
    dir: Path
    #: Why a failed (or preempted-out) run ended, in one sentence; None otherwise.
    reason: str | None = None


class _Request(msgspec.Struct):
    """The two fields of ``request.json`` (:class:`bladekit.wire.FunctionRequest`) shown here."""

    app: str
    function: str


_request_decoder = msgspec.json.Decoder(_Request)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process holds that id: it exists
        return True
    except OSError:
        return True
    return True


def _attempts(folder: Path) -> int:
    with contextlib.suppress(OSError):
        return sum(1 for entry in (folder / "attempts").iterdir() if entry.name.isdigit())
    return 0


def _row(folder: Path, host: str) -> RunRow | None:
    try:
        request = _request_decoder.decode((folder / "request.json").read_bytes())
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None  # being created (or not a run): nothing to name it by yet
    status = read_status(folder)
    checkpoint = read_checkpoint(folder)
    if status is None:
        try:
            submitted = (folder / "request.json").stat().st_mtime
        except OSError:
            return None
        state: RunState = "running"
        ended, attempts, interruptions = None, _attempts(folder), max(_attempts(folder) - 1, 0)
        reason, method = None, None
    else:
        submitted, ended = status.submitted_at, status.ended_at
        state, attempts, interruptions = status.state, status.attempts, status.interruptions
        reason, method = status.reason, status.method
        owner_gone = (
            status.owner_pid is not None
            and status.owner_host == host
            and not _alive(status.owner_pid)
        )
        if state == "running" and owner_gone:
            state = "failed"
            reason = f"its caller (process {status.owner_pid}) ended without closing it"
    return RunRow(
        run_id=folder.name,
        app=request.app,
        function=request.function,
        method=method,
        state=state,
        submitted_at=submitted,
        ended_at=ended,
        attempts=attempts,
        interruptions=interruptions,
        resumed=resumed_attempts(folder),
        checkpoint_bytes=None if checkpoint is None else checkpoint.size,
        checkpoint_at=None if checkpoint is None else checkpoint.saved_at,
        dir=folder,
        reason=reason,
    )


def run_row(folder: Path) -> RunRow | None:
    """The run in ``folder`` (``home/bladekit/runs/RUN_ID``); None when it is not (yet) a run."""
    return _row(Path(folder), socket.gethostname())


def runs(home: Path) -> list[RunRow]:
    """Every run under ``home/bladekit/runs`` (``home`` is ``PORTAL_HOME``), oldest first.

    An empty list when there is no such folder (bladekit never ran with this home).
    """
    root = Path(home) / "bladekit" / "runs"
    try:
        folders = [entry for entry in root.iterdir() if entry.is_dir()]
    except OSError:
        return []
    host = socket.gethostname()
    rows = [row for folder in folders if (row := _row(folder, host)) is not None]
    rows.sort(key=lambda row: (row.submitted_at, row.run_id))
    return rows
