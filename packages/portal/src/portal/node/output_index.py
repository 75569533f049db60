"""When the job's output grew: the node's record of its stdout and stderr sizes over time.

The job writes straight into its two files (its file descriptors are the files: nothing of
Portal sits between the program and its output, so writing costs it nothing more). Which bytes
of one came before which of the other is lost that way, and ``portal logs`` would replay all of
stdout, then all of stderr. So the node notes both sizes whenever one of them changed:
``AT STDOUT_SIZE STDERR_SIZE`` per line, in ``attempts/N/output.idx``. A replay interleaves the
two files by these lines (:mod:`portal.control.output_order`).

The sizes are sampled every :data:`SAMPLE_S` on a thread of the index's own, not by the node's
supervising loop: that loop also handles the runtime's greeting, notices and uploads, and a
tick of it that took 0.3 s once put a resumed job's first stderr line after the stdout line it
wrote 0.3 s later. Where both files grew within one sample, their modification times say which
was written last: when stderr's last write came before stdout's, two lines are noted (stderr's
growth, then stdout's), so the order holds to the file system's clock (a few ms) and not only to
the sample. Where the times tie, stdout is given first.

Two ``fstat`` calls per sample; a line only when the output changed. A line is written whole
with one ``write`` and flushed, so a reader sees whole lines (a torn last line is ignored).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["SAMPLE_S", "OutputIndex"]

#: Seconds between two samples of the files' sizes.
SAMPLE_S = 0.02


class OutputIndex:
    """Samples the sizes of ``stdout`` and ``stderr`` (open files) into ``path``, every
    :data:`SAMPLE_S` once :meth:`start` is called; ``now`` gives the wall-clock time noted."""

    def __init__(
        self, path: Path, stdout: BinaryIO, stderr: BinaryIO, now: Callable[[], float]
    ) -> None:
        self._files = (stdout, stderr)
        self._sizes = (-1, -1)
        self._now = now
        self._out = path.open("a", encoding="ascii")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="output-index", daemon=True)

    def start(self) -> OutputIndex:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        """Note the sizes now if either changed since the last sample."""
        with self._lock:
            if self._out.closed:
                return
            try:
                out, err = (os.fstat(f.fileno()) for f in self._files)
            except (OSError, ValueError):  # a file closed under us: the attempt is ending
                return
            sizes = (out.st_size, err.st_size)
            if sizes == self._sizes:
                return
            at = self._now()
            lines = ""
            old = self._sizes
            both_grew = old[0] >= 0 and sizes[0] > old[0] and sizes[1] > old[1]
            if both_grew and err.st_mtime_ns < out.st_mtime_ns:  # stderr's last write first
                lines = f"{at:.3f} {old[0]} {sizes[1]}\n"
            self._sizes = sizes
            self._out.write(lines + f"{at:.3f} {sizes[0]} {sizes[1]}\n")
            self._out.flush()

    def close(self) -> None:
        """Stop sampling, note the last sizes (what the job wrote as it ended), and close."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.sample()
        with self._lock:
            self._out.close()
