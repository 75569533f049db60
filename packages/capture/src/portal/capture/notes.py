"""Notes a restore leaves for the job's events: what arrived differently from how it left.

A capture extension that has to restore a value otherwise than it was saved (GPU tensors onto the
CPU of a machine without a GPU) says so here while the checkpoint loads. The runtime hands the
notes to the node in its greeting on the control channel (``Hello.notes``), and the node records
each as a ``restore-note`` event, so that ``portal explain`` and the console show it, not only the
job's stderr. Each note is kept once, in the order made.
"""

from __future__ import annotations

import sys

__all__ = ["note_on_restore", "restore_notes"]

_NOTES: list[str] = []


def note_on_restore(text: str) -> None:
    """Record ``text`` for the job's events (once) and print it on stderr as Portal's note."""
    if text in _NOTES:
        return
    _NOTES.append(text)
    print(f"portal: {text}", file=sys.stderr, flush=True)


def restore_notes() -> tuple[str, ...]:
    """The notes made by this process's restore, oldest first."""
    return tuple(_NOTES)
