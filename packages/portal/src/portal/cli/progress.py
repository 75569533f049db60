"""The upload progress bar of an attached ``portal run`` / ``portal resume``, on stderr only.

The node reports ``upload-progress`` events about once a second (bytes done, total, rate, time
left). On a terminal they redraw one line in place; anywhere else (a pipe, a file, CI) they print
nothing, and the ``uploaded`` note that follows is the one-line summary: a log then holds one line
per checkpoint, not one per second. The program's own output never passes through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TextIO

from portal.core import units

__all__ = ["ProgressLine"]

_WIDTH = 24


class ProgressLine:
    """One redrawn line on ``stream`` while an upload runs (only when it is a terminal)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        try:
            self.enabled = stream.isatty()
        except (AttributeError, ValueError):
            self.enabled = False
        self._drawn = 0  # the length of the line on screen, 0 when none is

    def update(self, data: Mapping[str, Any]) -> None:
        """Draw an ``upload-progress`` event's figures."""
        if not self.enabled:
            return
        done = int(data.get("bytes_done") or 0)
        total = data.get("expected_bytes")
        share = min(1.0, done / total) if total else 0.0
        filled = int(share * _WIDTH)
        bar = "#" * filled + "-" * (_WIDTH - filled)
        parts = [units.size(done) + (f" of {units.size(total)}" if total else "")]
        if data.get("rate_bps"):
            parts.append(f"{units.size(float(data['rate_bps']))}/s")
        if data.get("eta_s") is not None:
            parts.append(f"{float(data['eta_s']):.0f} s left")
        text = f"portal: uploading [{bar}] {share:4.0%} {', '.join(parts)}"
        if data.get("will_miss_deadline"):
            text += " (will miss the deadline)"
        pad = max(0, self._drawn - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._drawn = len(text)

    def end(self) -> None:
        """Finish the line on screen so the next note starts on its own."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = 0
