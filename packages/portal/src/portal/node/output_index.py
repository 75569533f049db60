"""When the job's output grew: the node's record of its stdout and stderr sizes over time.

The job writes straight into its two files (its file descriptors are the files: nothing of
Portal sits between the program and its output, so writing costs it nothing more). Which bytes
of one came before which of the other is lost that way, and ``portal logs`` would replay all of
stdout, then all of stderr. So the node, which looks at the job every ~50 ms anyway, notes both
sizes whenever one of them changed: ``AT STDOUT_SIZE STDERR_SIZE`` per line, in
``attempts/N/output.idx``. A replay interleaves the two files by these lines
(:mod:`portal.control.output_order`): in time order to within the node's tick; bytes that
arrived in one tick on both streams are replayed stdout first.

Two ``fstat`` calls per tick; a line only when the output changed. A line is written whole with
one ``write`` and flushed, so a reader sees whole lines (a torn last line is ignored).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

__all__ = ["OutputIndex"]


class OutputIndex:
    """Samples the sizes of ``stdout`` and ``stderr`` (open files) into ``path``."""

    def __init__(self, path: Path, stdout: BinaryIO, stderr: BinaryIO) -> None:
        self._files = (stdout, stderr)
        self._sizes = (-1, -1)
        self._out = path.open("a", encoding="ascii")

    def sample(self, at: float) -> None:
        """Note the sizes at ``at`` (wall-clock seconds) if either changed since the last."""
        if self._out.closed:
            return
        try:
            sizes = (
                os.fstat(self._files[0].fileno()).st_size,
                os.fstat(self._files[1].fileno()).st_size,
            )
        except (OSError, ValueError):  # a file closed under us: the attempt is ending
            return
        if sizes == self._sizes:
            return
        self._sizes = sizes
        self._out.write(f"{at:.3f} {sizes[0]} {sizes[1]}\n")
        self._out.flush()

    def close(self, at: float) -> None:
        """The last sample (what the job wrote as it ended), then close."""
        self.sample(at)
        self._out.close()
