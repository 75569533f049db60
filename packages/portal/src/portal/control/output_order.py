"""An attempt's stdout and stderr in the order they were written, from the node's index.

The node notes both files' sizes whenever one grew (``portal.node.output_index``); here those
notes become a list of pieces, ``(stream, start, end)`` byte ranges, that replay the two files
interleaved as they grew. Bytes of both streams within one note are given stdout first. What
no note covers (an attempt from a Portal without the index, or bytes written after the last
note) follows at the end, stdout then stderr, so nothing is ever left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

__all__ = ["Piece", "Stream", "ordered_pieces"]

Stream = Literal["stdout", "stderr"]
#: One byte range of one stream: ``(stream, start, end)``.
Piece = tuple[Stream, int, int]


def _notes(index: Path) -> list[tuple[int, int]]:
    """The index's ``(stdout size, stderr size)`` notes, in order; a torn or odd line is
    skipped (the file is appended to while the job runs)."""
    try:
        text = index.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return []
    notes: list[tuple[int, int]] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3 or not (parts[1].isdigit() and parts[2].isdigit()):
            continue
        notes.append((int(parts[1]), int(parts[2])))
    return notes


def ordered_pieces(
    index: Path,
    *,
    stdout_size: int,
    stderr_size: int,
    streams: tuple[Stream, ...] = ("stdout", "stderr"),
) -> list[Piece]:
    """The pieces that replay ``streams`` of the files, up to the given sizes (a cut attempt's
    kept output, or what the files hold now), in the order they were written."""
    limits = {"stdout": stdout_size, "stderr": stderr_size}
    done = {"stdout": 0, "stderr": 0}
    pieces: list[Piece] = []

    def reach(stream: Stream, size: int) -> None:
        end = min(size, limits[stream])
        if end > done[stream]:
            if stream in streams:
                pieces.append((stream, done[stream], end))
            done[stream] = end

    for out, err in _notes(index):
        reach("stdout", out)
        reach("stderr", err)
    reach("stdout", stdout_size)
    reach("stderr", stderr_size)
    return pieces
