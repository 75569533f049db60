"""A job's checkpoints as the control plane knows them: what the store holds, what was recorded as
stored, and what was found damaged. One account for ``portal checkpoints``, ``portal status`` and
the choice ``portal resume`` makes.

The store alone cannot tell a damaged checkpoint from one cut short, nor know the job's newest:

* **complete**: its manifest authenticates (and, verified, every chunk does).
* **incomplete**: its upload was cut short before its manifest was written; never resumable, kept
  for inspection (garbage collection leaves it, see ``portal.storage.gc``).
* **damaged**: it was stored complete but its bytes are no longer what was written: a chunk or
  its manifest fails its check (found by a resume's download or ``portal checkpoints --verify``,
  and remembered: event ``checkpoint-damaged``), or its manifest is gone although the control
  plane recorded it stored. Never resumed, and named wherever checkpoints are listed. A mark is
  not for ever: ``--verify``, or a resume that names the checkpoint, reads its bytes again, and
  when they check out (a bucket's version restored, a read that failed once) the mark is cleared
  (event ``checkpoint-repaired``) and said.
* **missing**: recorded as stored, and gone from the store.

A resume takes the newest checkpoint that is complete and not damaged, and only when that is the
last one recorded (or newer): resuming from an earlier one does the work since it again, which is
the user's choice to make (``portal resume --use-earlier`` or ``--checkpoint ID``), never Portal's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs

from portal.core.domain import CheckpointRef, CheckpointState, Event
from portal.core.errors import PortalError

__all__ = [
    "DAMAGED_EVENT",
    "DAMAGE_CODES",
    "KEPT",
    "REPAIRED_EVENT",
    "STORED_KINDS",
    "CheckpointView",
    "damaged_marks",
    "job_checkpoints",
    "kept_checkpoint",
    "mark_damaged",
    "read_twice",
    "recorded_checkpoints",
]

#: Events that say a checkpoint of the job was stored (their ``checkpoint`` field).
STORED_KINDS = frozenset({"uploaded", "suspended", "checkpoint-periodic"})
#: The ``upload-failed`` event's field naming a checkpoint file kept whole on the machine, not
#: stored (``portal.node.spool``): the next resume stores it first.
KEPT = "kept"
#: The store's codes for a checkpoint that fails its check: damage, once confirmed.
DAMAGE_CODES = frozenset({"CHECKPOINT_CORRUPT", "WRONG_KEY", "CHECKPOINT_INCOMPLETE"})
#: The event that marks a checkpoint damaged (``checkpoint``, ``reason``).
DAMAGED_EVENT = "checkpoint-damaged"
#: The event that clears that mark: its bytes were read again and check out (``checkpoint``).
REPAIRED_EVENT = "checkpoint-repaired"

T = TypeVar("T")

log = logging.getLogger("portal.control")

_CUT_SHORT = "its upload was cut short before its manifest was written; kept for inspection"


@attrs.frozen(kw_only=True)
class CheckpointView:
    """One checkpoint of a job: its state (``complete``, ``incomplete``, ``damaged``,
    ``missing``) and, for any but complete, why it cannot be resumed."""

    id: str
    created_at: float
    bytes: int
    state: str
    why: str = ""
    #: Marked damaged before, and found whole by this listing's reading (the mark cleared).
    repaired: bool = False

    @property
    def resumable(self) -> bool:
        return self.state == "complete"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "created_at": self.created_at,
            "bytes": self.bytes,
            "state": self.state,
            "resumable": self.resumable,
            "why": self.why,
            "repaired": self.repaired,
        }


def recorded_checkpoints(events: Iterable[Event]) -> dict[str, float]:
    """The checkpoints the control plane recorded as stored, oldest first, with when."""
    recorded: dict[str, float] = {}
    for event in events:
        ckpt = event.data.get("checkpoint")
        if event.kind in STORED_KINDS and isinstance(ckpt, str) and ckpt:
            recorded.setdefault(ckpt, event.at)
    return recorded


def kept_checkpoint(events: Iterable[Event]) -> tuple[Path, int] | None:
    """The checkpoint file (and the attempt that wrote it) the job's last failed upload kept,
    when no checkpoint was stored after it and the file is still there."""
    kept: tuple[Path, int] | None = None
    for event in events:
        path = event.data.get(KEPT)
        if event.kind == "upload-failed" and isinstance(path, str) and path:
            kept = (Path(path), int(event.data.get("attempt") or 0))
        elif event.kind in STORED_KINDS:
            kept = None
    if kept is None or not kept[0].is_file():
        return None
    return kept


def damaged_marks(events: Iterable[Event]) -> dict[str, str]:
    """Checkpoints found damaged, with why (the latest finding), less those found whole since."""
    marks: dict[str, str] = {}
    for event in events:
        ckpt = event.data.get("checkpoint")
        if event.kind == DAMAGED_EVENT and isinstance(ckpt, str):
            marks[ckpt] = str(event.data.get("reason") or "its bytes failed their check")
        elif event.kind == REPAIRED_EVENT and isinstance(ckpt, str):
            marks.pop(ckpt, None)
    return marks


def _clear_mark(plane: Any, job_id: str, checkpoint_id: str, marks: dict[str, str]) -> None:
    """Record that a checkpoint marked damaged was read whole: it can be resumed again."""
    reason = marks.pop(checkpoint_id)
    plane.record(
        job_id,
        REPAIRED_EVENT,
        f"checkpoint {checkpoint_id} reads whole again (every chunk checked): it was marked "
        f"damaged ({reason}), and can be resumed again",
        checkpoint=checkpoint_id,
        was=reason,
    )


def mark_damaged(
    plane: Any,
    job_id: str,
    checkpoint_id: str,
    reason: str,
    *,
    marks: dict[str, str] | None = None,
) -> None:
    """Remember that ``checkpoint_id`` is damaged (once per finding: the same reason again is
    not a new event), so that no resume takes it again and every listing names it. ``marks``:
    the job's :func:`damaged_marks`, when the caller has read its events already."""
    if marks is None:
        marks = damaged_marks(e for _, e in plane.store.events(job_id))
    if marks.get(checkpoint_id) == reason:
        return
    marks[checkpoint_id] = reason
    plane.record(
        job_id,
        DAMAGED_EVENT,
        f"checkpoint {checkpoint_id} is damaged and will not be resumed: {reason}",
        checkpoint=checkpoint_id,
        reason=reason,
    )


def read_twice(read: Callable[[], T]) -> T:
    """``read()`` (a checkpoint's manifest or chunks, checked), once more when its check fails:
    a read that failed once (a flaky disk or network) is not damage, and a damage mark keeps
    the checkpoint from every resume. The second failure is raised."""
    try:
        return read()
    except PortalError as exc:
        if exc.code not in DAMAGE_CODES:
            raise
        log.warning("a checkpoint failed its check (%s): reading it again", exc)
    return read()


def _why_broken(store: Any, job_id: str, checkpoint_id: str, *, verify: bool) -> str | None:
    """Why the checkpoint cannot be read whole (None: it can): its manifest, and with
    ``verify`` every chunk, checked (:func:`read_twice`)."""
    try:
        if verify:
            read_twice(lambda: store.open_reader(job_id, checkpoint_id).verify())
        else:
            read_twice(lambda: store.manifest(job_id, checkpoint_id))
    except PortalError as exc:
        if exc.code in DAMAGE_CODES:
            return str(exc)
        raise
    return None


def job_checkpoints(
    plane: Any,
    store: Any,
    job_id: str,
    *,
    verify: bool = False,
    recheck: Collection[str] = (),
    listed: Sequence[CheckpointRef] | None = None,
    events: Sequence[Event] | None = None,
) -> list[CheckpointView]:
    """Every checkpoint of the job, oldest first, in the states above. ``verify`` reads every
    chunk of each one in the store (slow: the whole checkpoint), marks what fails damaged, and
    clears the mark of one that checks out; ``recheck`` does so for the checkpoints it names
    only (a resume's ``--checkpoint``). ``listed`` and ``events``: the store's listing and the
    job's events, when the caller has them already."""
    if events is None:
        events = [e for _, e in plane.store.events(job_id)]
    recorded = recorded_checkpoints(events)
    marks = damaged_marks(events)
    found = dict(marks)  # what this listing marks, so that each finding is recorded once
    views: list[CheckpointView] = []
    seen: set[str] = set()
    for ref in store.list(job_id) if listed is None else listed:
        ckpt = ref.checkpoint_id
        seen.add(ckpt)
        created = ref.created_at or recorded.get(ckpt, 0.0)
        if ref.state is CheckpointState.INCOMPLETE:
            if ckpt in recorded:  # stored whole once: its manifest went afterwards
                gone = "its manifest is gone from the store, though it was stored complete"
                mark_damaged(plane, job_id, ckpt, gone, marks=found)
                views.append(
                    CheckpointView(id=ckpt, created_at=created, bytes=0, state="damaged", why=gone)
                )
            else:
                views.append(
                    CheckpointView(
                        id=ckpt, created_at=created, bytes=0, state="incomplete", why=_CUT_SHORT
                    )
                )
            continue
        broken = None
        read = verify or ckpt in recheck
        if ref.state is CheckpointState.CORRUPT or read:
            broken = _why_broken(store, job_id, ckpt, verify=read)
        repaired = False
        if broken is not None:
            mark_damaged(plane, job_id, ckpt, broken, marks=found)
        elif read and ckpt in found:
            _clear_mark(plane, job_id, ckpt, found)
            repaired = True
        reason = broken or found.get(ckpt)
        views.append(
            CheckpointView(
                id=ckpt,
                created_at=created,
                bytes=ref.size_bytes,
                state="damaged" if reason else "complete",
                why=reason or "",
                repaired=repaired,
            )
        )
    for ckpt, at in recorded.items():
        if ckpt not in seen:
            views.append(
                CheckpointView(
                    id=ckpt,
                    created_at=at,
                    bytes=0,
                    state="missing",
                    why=f"recorded as stored, and gone from the store {store.url}",
                )
            )
    views.sort(key=lambda v: (v.created_at, v.id))
    return views
