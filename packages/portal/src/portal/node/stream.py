"""Streaming a checkpoint to the store while the runtime is still writing it.

The runtime writes its checkpoint image to a temporary file next to ``--checkpoint PATH``
(``.NAME.PID.tmp``, fsynced, then renamed to ``PATH``: see ``portal.capture.image.write_image``).
The node opens that file as soon as it appears and feeds the store's writer as the bytes arrive,
so the time from pause to stored checkpoint is about the longer of capture and upload, not their
sum. The file is also the local spool: if streaming fails for any reason, the node uploads the
finished file as before.

The image's own layout tells the streamer everything it needs, cheaply, through the image's one
parser (``portal.capture.image``: :func:`header_length`, :class:`ImageLayout`,
:func:`check_trailer`, which ``read_image`` uses too): the header's lengths give the total size
(for the progress bar's ETA and the deadline projection) and where each out-of-band buffer starts
(a ``cut()`` there keeps a tensor's chunks aligned from one checkpoint to the next), and the
trailing CRC-32 proves the streamed bytes are the ones the runtime wrote.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from portal.capture.errors import CheckpointCorruptError, CheckpointFormatTooNewError
from portal.capture.image import (
    PREFIX_BYTES,
    TRAILER_BYTES,
    ImageLayout,
    check_trailer,
    header_length,
)

__all__ = ["CheckpointStream", "StreamBroken", "partial_files"]

log = logging.getLogger("portal.node")

_READ = 4 * 1024 * 1024
_POLL_S = 0.005


class StreamBroken(Exception):
    """The producer stopped before the image was whole, or its bytes do not check out."""


def partial_files(target: Path) -> list[Path]:
    """The runtime's temporary files for ``target`` (one per writing process)."""
    return sorted(target.parent.glob(f".{target.name}.*.tmp"))


class CheckpointStream:
    """Uploads the checkpoint the runtime is writing at ``target``, on a thread of its own.

    :meth:`start` begins waiting for the file; :meth:`producer_exited` says no more bytes will
    come once the file stops growing; :meth:`result` waits for the stored checkpoint's ref (or
    raises); :meth:`cancel` gives up (what was stored stays as an incomplete checkpoint, which is
    never resumed, unless the runtime failed to write it: then it is discarded).
    """

    def __init__(
        self,
        store: Any,
        job_id: str,
        target: Path,
        *,
        deadline: float | None,
        summary: dict[str, Any],
    ) -> None:
        self.store = store
        self.job_id = job_id
        self.target = target
        self.deadline = deadline
        self.summary = summary
        self.started_at: float | None = None  # monotonic, when the first byte was read
        self.expected_bytes: int | None = None
        self._writer: Any = None
        self._progress: Any = None
        self._ref: Any = None
        self._error: BaseException | None = None
        self._cancelled = threading.Event()
        self._producer_done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-stream", daemon=True)

    # --- the node's side ------------------------------------------------------------------------

    def start(self) -> CheckpointStream:
        self._thread.start()
        return self

    def producer_exited(self) -> None:
        self._producer_done.set()

    def cancel(self, *, discard: bool = False) -> None:
        """Give up. ``discard``: the runtime failed to write the checkpoint (a full disk, say),
        so what was stored of it is deleted rather than kept as an incomplete checkpoint; it
        would only take room, on a full disk the room the job needs."""
        self._cancelled.set()
        self._thread.join(timeout=10.0)
        writer = self._writer
        if discard and writer is not None and not self._thread.is_alive():
            try:
                writer.discard()
            except Exception:  # kept as an incomplete checkpoint, as a cut-short one is
                log.warning("discarding the failed checkpoint's upload failed", exc_info=True)

    @property
    def progress(self) -> Any:
        """The writer's latest :class:`portal.storage.Progress`, or None before the first chunk."""
        return self._progress

    @property
    def reading(self) -> bool:
        """True once the runtime has started writing (the upload is under way)."""
        return self.started_at is not None

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self, timeout_s: float | None = None) -> Any:
        """The stored checkpoint's ref; raises what stopped the stream."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError("the checkpoint stream has not finished")
        if self._error is not None:
            raise self._error
        if self._ref is None:
            raise StreamBroken("the checkpoint stream was cancelled")
        return self._ref

    # --- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            source = self._wait_for_source()
            if source is None:
                return
            with source:
                self._ref = self._upload(source)
        except BaseException as exc:  # reported through result()
            self._error = exc

    def _wait_for_source(self) -> BinaryIO | None:
        while not self._cancelled.is_set():
            for path in [*partial_files(self.target), self.target]:
                try:
                    return path.open("rb")
                except FileNotFoundError:
                    continue
            if self._producer_done.is_set():
                raise StreamBroken(f"the runtime exited without writing {self.target}")
            time.sleep(_POLL_S)
        return None

    def _chunks(self, source: BinaryIO, n: int) -> Iterator[bytes]:
        """Exactly ``n`` bytes as they arrive; a producer that stops short breaks the stream."""
        while n > 0:
            data = source.read(min(n, _READ))
            if data and self._cancelled.is_set():  # a finished file is read without pause
                raise StreamBroken("the checkpoint stream was cancelled")
            if data:
                if self.started_at is None:
                    self.started_at = time.monotonic()
                n -= len(data)
                yield data
                continue
            if self._cancelled.is_set():
                raise StreamBroken("the checkpoint stream was cancelled")
            if self._producer_done.is_set():
                data = source.read(min(n, _READ))  # the last bytes before the exit
                if not data:
                    raise StreamBroken(
                        f"the runtime stopped with {n} bytes of its checkpoint still unwritten"
                    )
                n -= len(data)
                yield data
                continue
            time.sleep(_POLL_S)

    def _read(self, source: BinaryIO, n: int) -> bytes:
        return b"".join(self._chunks(source, n))

    def _upload(self, source: BinaryIO) -> Any:
        path = str(self.target)
        try:
            prefix = self._read(source, PREFIX_BYTES)
            layout = ImageLayout.parse(
                prefix, self._read(source, header_length(prefix, path)), path
            )
        except (CheckpointCorruptError, CheckpointFormatTooNewError) as exc:
            raise StreamBroken(str(exc)) from exc
        total = layout.total
        self.expected_bytes = total
        crc = layout.head_crc
        with self.store.open_writer(
            self.job_id,
            expected_bytes=total,
            deadline=self.deadline,
            on_progress=self._on_progress,
        ) as writer:
            self._writer = writer
            writer.write(layout.prefix + layout.raw_header)
            for what, length in layout.sections:
                if what.startswith("buffer"):
                    writer.cut()  # a large buffer starts here: keep its chunks aligned
                for piece in self._chunks(source, length):
                    crc = zlib.crc32(piece, crc)
                    writer.write(piece)
            trailer = self._read(source, TRAILER_BYTES)
            try:
                check_trailer(trailer, crc, path)
            except CheckpointCorruptError as exc:
                raise StreamBroken(str(exc)) from exc
            writer.write(trailer)
            ref = writer.commit({**self.summary, "bytes": total, "streamed": True})
        self._progress = writer.progress()
        return ref

    def _on_progress(self, progress: Any) -> None:
        self._progress = progress
