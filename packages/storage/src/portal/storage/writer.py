"""Writing one checkpoint: stream in, packs out in parallel, manifest last.

The producer (the capture engine) calls :meth:`CheckpointWriter.write` with bytes as it makes
them. The stream is cut into small chunks (the dedup unit, see :mod:`portal.storage.chunking`);
every ``pack_size`` bytes of chunks go as one task to a thread pool that fingerprints each chunk,
seals the new ones straight into a reused pack buffer and stores the pack as one object, while the
producer continues. Fingerprinting (BLAKE3) and the disk write release the GIL, so on two cores
the stages overlap. At most ``max_in_flight`` packs are queued or in transfer, and the pack buffers
are reused, so memory stays bounded (about ``max_in_flight x pack_size``, plus the producer's own
bytes, which are sliced, not copied, when immutable) however large the state is; ``write`` blocks
when the pool is full, which is the back-pressure a slow store should exert.

Chunks whose fingerprint the newest complete checkpoint already holds are not sent again: the new
manifest points at the stored bytes (pack, offset, length) and records the seal (checkpoint,
position) they were encrypted under. Dedup only against the newest complete checkpoint is
deliberate: garbage collection never touches that one, so a chunk the writer counts on cannot be
collected under it.

Nothing is resumable until :meth:`commit` writes the manifest. A writer that fails, is aborted or is
killed leaves an intent marker and some packs: an *incomplete* checkpoint, listed as such, kept for
inspection, and never chosen for resume.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Literal

import attrs

from portal.core.clock import Clock
from portal.core.domain import CheckpointRef, CheckpointState
from portal.storage.chunking import FixedChunker, Piece
from portal.storage.crypto import FINGERPRINT_ALGORITHM, JobKeys
from portal.storage.errors import CheckpointDeadlineError, StorageError
from portal.storage.format import (
    CHUNK_OVERHEAD,
    CheckpointIntent,
    encode_intent,
    seal_chunk_into,
    seal_manifest,
    sealed_by,
)
from portal.storage.layout import (
    MANIFEST_NAME,
    STARTED_NAME,
    checkpoint_prefix,
    chunk_key,
    pack_name,
)
from portal.storage.manifest import MANIFEST_FORMAT, ChunkEntry, Manifest
from portal.storage.objects import StoredObjects
from portal.storage.progress import Progress, ProgressTracker

__all__ = ["CheckpointWriter", "DeadlinePolicy"]

DeadlinePolicy = Literal["warn", "raise"]


@attrs.frozen
class _Stored:
    """Sealed bytes the writer may point at instead of uploading the same chunk again."""

    key: str
    offset: int | None  # inside the pack ``key``; None: ``key`` holds this chunk alone
    stored_size: int
    sealed_in: str
    sealed_index: int


class CheckpointWriter:
    """One checkpoint being written. Use as a context manager, or call :meth:`commit`/:meth:`abort`.

    Thread-safety: one producer thread calls ``write``/``cut``/``commit``; progress callbacks run on
    transfer threads.
    """

    def __init__(
        self,
        objects: StoredObjects,
        *,
        clock: Clock,
        job_id: str,
        checkpoint_id: str,
        keys: JobKeys,
        parent: Manifest | None,
        chunk_size: int,
        pack_size: int,
        parallelism: int,
        max_in_flight: int,
        expected_bytes: int | None,
        deadline: float | None,
        on_progress: Callable[[Progress], None] | None,
        deadline_policy: DeadlinePolicy,
    ) -> None:
        if deadline_policy not in ("warn", "raise"):
            raise ValueError(f"deadline_policy must be 'warn' or 'raise', got {deadline_policy!r}")
        self.objects = objects
        self.job_id = job_id
        self.checkpoint_id = checkpoint_id
        self.parent_id = parent.checkpoint_id if parent else None
        self._keys = keys
        self._clock = clock
        self.created_at = self._clock.now()
        self._chunker = FixedChunker(chunk_size)
        self._prefix = checkpoint_prefix(job_id, checkpoint_id)
        self._tracker = ProgressTracker(
            job_id=job_id,
            checkpoint_id=checkpoint_id,
            clock=self._clock,
            expected_bytes=expected_bytes,
            deadline=deadline,
        )
        self._on_progress = on_progress
        self._deadline_policy = deadline_policy
        self._lock = threading.Lock()
        self._known: dict[str, _Stored] = {}
        if parent is not None and parent.fingerprint_algorithm == FINGERPRINT_ALGORITHM:
            # (fingerprints by another algorithm never match: such a parent shares nothing)
            for entry in parent.chunks:
                sealer, position = sealed_by(entry, parent.checkpoint_id)
                self._known.setdefault(
                    entry.fingerprint,
                    _Stored(
                        key=entry.key,
                        offset=entry.offset,
                        stored_size=entry.stored_size,
                        sealed_in=sealer,
                        sealed_index=position,
                    ),
                )
        self._entries: dict[int, ChunkEntry] = {}
        self._next_index = 0
        self._pack_size = max(1, pack_size)
        self._pending: list[Piece] = []  # chunks of the next pack, not yet submitted
        self._pending_bytes = 0
        self._next_pack = 0
        self._buffers: list[bytearray] = []  # pack buffers, reused (no fresh pages per pack)
        self._failure: BaseException | None = None
        self._late: Progress | None = None
        self._slots = threading.BoundedSemaphore(max(1, max_in_flight))
        self._futures: list[Future[None]] = []
        self._pool = ThreadPoolExecutor(
            max(1, parallelism), thread_name_prefix=f"portal-ckpt-{checkpoint_id[:16]}"
        )
        self._state: Literal["open", "committed", "aborted", "discarded"] = "open"
        intent = CheckpointIntent(
            job_id=job_id,
            checkpoint_id=checkpoint_id,
            created_at=self.created_at,
            parent=self.parent_id,
        )
        try:
            objects.put(self._prefix + STARTED_NAME, encode_intent(intent))
        except BaseException:
            self._pool.shutdown(wait=False)
            raise

    # --- producer side ------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes to the checkpoint's stream. Full chunks start uploading at once."""
        self._check_open()
        self._tracker.wrote(len(data) if isinstance(data, bytes) else memoryview(data).nbytes)
        for piece in self._chunker.feed(data):
            self._add(piece)

    def cut(self) -> None:
        """End the current chunk here, so what follows starts a new one.

        Call it before a large buffer whose bytes rarely change position (a tensor's storage): an
        insertion earlier in the stream then shifts only the chunks before the cut.
        """
        self._check_open()
        piece = self._chunker.cut()
        if piece is not None:
            self._add(piece)

    def progress(self) -> Progress:
        """Where the upload stands now."""
        return self._tracker.snapshot()

    def commit(self, summary: Mapping[str, Any] | None = None) -> CheckpointRef:
        """Wait for every chunk, then write the manifest: the checkpoint exists from here on.

        ``summary`` says what the state holds and how large (msgspec-encodable values).
        """
        self._check_open()
        try:
            piece = self._chunker.cut()
            if piece is not None:
                self._add(piece)
            self._submit_pack()
            for future in self._futures:
                future.result()
            self._raise_if_failed()
            entries = [self._entries[i] for i in range(self._next_index)]
            total = sum(e.size for e in entries)
            stream = self._keys.stream_fingerprint(
                ((bytes.fromhex(e.fingerprint), e.size) for e in entries), total
            )
            manifest = Manifest(
                format=MANIFEST_FORMAT,
                job_id=self.job_id,
                checkpoint_id=self.checkpoint_id,
                created_at=self.created_at,
                chunks=entries,
                total_size=total,
                fingerprint=stream.hex(),
                fingerprint_algorithm=FINGERPRINT_ALGORITHM,
                parent=self.parent_id,
                python=f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}",
                summary=dict(summary or {}),
            )
            sealed = seal_manifest(self._keys, manifest)
            self.objects.sync()  # every chunk durable before anything names it
            self.objects.put(self._prefix + MANIFEST_NAME, sealed)
            self._tracker.extra_upload(len(sealed))
        except BaseException:
            self.abort()
            raise
        self._state = "committed"
        self._pool.shutdown(wait=True)
        final = self._tracker.snapshot(final=True)
        self._notify(final)
        return CheckpointRef(
            job_id=self.job_id,
            checkpoint_id=self.checkpoint_id,
            url=f"{self.objects.url}/{self._prefix.rstrip('/')}",
            created_at=self.created_at,
            size_bytes=sum(e.stored_size for e in entries),
            state=CheckpointState.COMPLETE,
        )

    def abort(self) -> None:
        """Stop uploading. What was stored stays, as an incomplete checkpoint (never resumed)."""
        if self._state != "open":
            return
        self._state = "aborted"
        self._pool.shutdown(wait=True, cancel_futures=True)

    def discard(self) -> None:
        """Stop, and delete what this writer stored: for a checkpoint its producer failed to
        write (a full disk, a state that broke), whose parts are of no use to anyone, and on a
        full disk take room the job needs. Its packs hold only chunks sealed for it and no
        manifest names them, so nothing else depends on them. The packs go first and the intent
        marker last: a discard cut short still lists as an incomplete checkpoint. Not after
        :meth:`commit` (a complete checkpoint is deleted by garbage collection only)."""
        if self._state == "committed":
            raise StorageError(
                f"checkpoint {self.checkpoint_id} of job {self.job_id} is complete: it is not "
                "discarded by its writer (garbage collection deletes complete checkpoints)",
                details={"job_id": self.job_id, "checkpoint_id": self.checkpoint_id},
            )
        self.abort()
        for number in range(self._next_pack):
            self.objects.delete(chunk_key(self.job_id, pack_name(self.checkpoint_id, number)))
        self.objects.delete(self._prefix + STARTED_NAME)
        self._state = "discarded"

    def __enter__(self) -> CheckpointWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None or self._state == "open":
            # Leaving the block without commit() means the checkpoint is not wanted.
            self.abort()

    @property
    def state(self) -> str:
        return self._state

    # --- transfer side ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._state != "open":
            raise StorageError(
                f"checkpoint {self.checkpoint_id} of job {self.job_id} is already {self._state}; "
                "open a new writer to write another checkpoint",
                details={"job_id": self.job_id, "checkpoint_id": self.checkpoint_id},
            )
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            failure = self._failure
            self.abort()
            raise failure
        if self._late is not None and self._deadline_policy == "raise":
            late = self._late
            self.abort()
            raise CheckpointDeadlineError(
                f"checkpoint {self.checkpoint_id} of job {self.job_id} will not be stored before "
                f"its deadline: {late.describe()}, {max(0.0, late.deadline_in_s or 0.0):.1f} s "
                "left. The upload was stopped; the previous complete checkpoint is unchanged. "
                "Keep the state smaller, or prefer machines with a longer notice",
                details={
                    "job_id": self.job_id,
                    "checkpoint_id": self.checkpoint_id,
                    "eta_s": late.eta_s,
                    "deadline_in_s": late.deadline_in_s,
                },
            )

    def _add(self, piece: Piece) -> None:
        self._pending.append(piece)
        self._pending_bytes += len(piece)
        if self._pending_bytes >= self._pack_size:
            self._submit_pack()

    def _submit_pack(self) -> None:
        if not self._pending:
            return
        pieces, first = self._pending, self._next_index
        number = self._next_pack
        self._pending, self._pending_bytes = [], 0
        self._next_index += len(pieces)
        self._next_pack += 1
        while not self._slots.acquire(timeout=0.5):
            self._raise_if_failed()
        try:
            future = self._pool.submit(self._store_pack, number, first, pieces)
        except BaseException:
            self._slots.release()
            raise
        self._futures.append(future)

    def _take_buffer(self, size: int) -> bytearray:
        with self._lock:
            buffer = self._buffers.pop() if self._buffers else None
        if buffer is None or len(buffer) < size:
            buffer = bytearray(max(size, self._pack_size + 64 * CHUNK_OVERHEAD))
        return buffer

    def _store_pack(self, number: int, first: int, pieces: list[Piece]) -> None:
        """Fingerprint each chunk, seal the new ones into one pack, store it (a transfer thread)."""
        buffer: bytearray | None = None
        try:
            if self._failure is not None or self._state == "aborted":
                return
            buffer = self._take_buffer(sum(len(p) for p in pieces) + len(pieces) * CHUNK_OVERHEAD)
            out = memoryview(buffer)
            key = pack_name(self.checkpoint_id, number)
            cursor = 0
            entries: list[tuple[ChunkEntry, bool]] = []
            for index, piece in enumerate(pieces, start=first):
                fingerprint = self._keys.fingerprint(piece, FINGERPRINT_ALGORITHM)
                fp_hex = fingerprint.hex()
                size = len(piece)
                with self._lock:
                    stored = self._known.get(fp_hex)
                    if stored is None:
                        stored = _Stored(
                            key=key,
                            offset=cursor,
                            stored_size=size + CHUNK_OVERHEAD,
                            sealed_in=self.checkpoint_id,
                            sealed_index=index,
                        )
                        self._known[fp_hex] = stored
                        new = True
                    else:
                        new = False
                if new:
                    cursor += seal_chunk_into(
                        self._keys,
                        checkpoint_id=self.checkpoint_id,
                        index=index,
                        plaintext=piece,
                        fingerprint=fingerprint,
                        out=out[cursor:],
                    )
                own = stored.sealed_in == self.checkpoint_id
                entry = ChunkEntry(
                    index=index,
                    fingerprint=fp_hex,
                    size=size,
                    stored_size=stored.stored_size,
                    key=stored.key,
                    sealed_in=None if own else stored.sealed_in,
                    sealed_index=None
                    if own and stored.sealed_index == index
                    else stored.sealed_index,
                    offset=stored.offset,
                )
                entries.append((entry, new))
            del pieces
            if cursor:
                self.objects.put_pack(chunk_key(self.job_id, key), out[:cursor])
            del out
            with self._lock:
                for entry, _new in entries:
                    self._entries[entry.index] = entry
            for entry, new in entries:
                self._tracker.chunk_done(entry.size, entry.stored_size if new else 0)
            snapshot = self._tracker.snapshot()
            if snapshot.will_miss_deadline and self._late is None:
                self._late = snapshot
            self._notify(snapshot)
        except BaseException as exc:
            if self._failure is None:
                self._failure = exc
            raise
        finally:
            if buffer is not None:
                with self._lock:
                    self._buffers.append(buffer)
            self._slots.release()

    def _notify(self, progress: Progress) -> None:
        if self._on_progress is None:
            return
        try:
            self._on_progress(progress)
        except Exception:  # a display callback must never fail the checkpoint
            import logging

            logging.getLogger("portal.storage").exception("progress callback failed")
