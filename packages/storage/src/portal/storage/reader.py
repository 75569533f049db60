"""Reading one checkpoint back, verifying everything before it is handed on.

A checkpoint is code (it is unpickled), so nothing unauthenticated may reach a deserializer:

* the manifest is checked (checksum, key id, AEAD) when the reader opens, and its chunk list is
  checked against its own whole-stream fingerprint, count and size before any chunk is fetched;
* every chunk is authenticated as the object sealed for its entry (job, checkpoint, position,
  size, fingerprint) and its plaintext fingerprint recomputed, before it is yielded.

:meth:`CheckpointReader.open` goes further and stores the whole verified stream in a temporary file
before returning it, so a resume never starts on a checkpoint that turns out to be damaged halfway.
Chunks are fetched in parallel, a bounded window ahead of the consumer.
"""

from __future__ import annotations

import io
import tempfile
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO

from portal.core.domain import CheckpointRef, CheckpointState
from portal.storage.crypto import JobKeys
from portal.storage.errors import CheckpointCorruptError
from portal.storage.format import open_chunk
from portal.storage.layout import checkpoint_prefix, chunk_key
from portal.storage.manifest import ChunkEntry, Manifest
from portal.storage.objects import StoredObjects

__all__ = ["CheckpointReader"]


class CheckpointReader:
    """A complete checkpoint whose manifest has been verified; chunks are verified as they arrive."""

    def __init__(
        self, objects: StoredObjects, keys: JobKeys, manifest: Manifest, *, parallelism: int
    ) -> None:
        self.objects = objects
        self.manifest = manifest
        self._keys = keys
        self._parallelism = max(1, parallelism)
        self._check_structure()

    @property
    def job_id(self) -> str:
        return self.manifest.job_id

    @property
    def checkpoint_id(self) -> str:
        return self.manifest.checkpoint_id

    @property
    def ref(self) -> CheckpointRef:
        prefix = checkpoint_prefix(self.job_id, self.checkpoint_id).rstrip("/")
        return CheckpointRef(
            job_id=self.job_id,
            checkpoint_id=self.checkpoint_id,
            url=f"{self.objects.url}/{prefix}",
            created_at=self.manifest.created_at,
            size_bytes=sum(c.stored_size for c in self.manifest.chunks),
            state=CheckpointState.COMPLETE,
        )

    def _corrupt(self, what: str, **details: object) -> CheckpointCorruptError:
        return CheckpointCorruptError(
            f"checkpoint {self.checkpoint_id} of job {self.job_id}: {what}. It is kept for "
            "diagnosis and is not resumable; resume from an earlier checkpoint",
            details={"job_id": self.job_id, "checkpoint_id": self.checkpoint_id, **details},
        )

    def _check_structure(self) -> None:
        chunks = self.manifest.chunks
        self._keys.fingerprint(b"", self.manifest.fingerprint_algorithm)  # known, or a clear error
        for position, entry in enumerate(chunks):
            if (
                entry.index != position
                or entry.size < 0
                or (entry.offset is not None and entry.offset < 0)
            ):
                raise self._corrupt(
                    f"its manifest lists chunk {entry.index} at position {position}",
                    chunk=entry.index,
                )
        total = sum(c.size for c in chunks)
        if total != self.manifest.total_size:
            raise self._corrupt(
                f"its chunks add up to {total} bytes, the manifest says {self.manifest.total_size}"
            )
        try:
            stream = self._keys.stream_fingerprint(
                ((bytes.fromhex(c.fingerprint), c.size) for c in chunks), total
            )
        except ValueError:
            raise self._corrupt("its manifest holds a malformed fingerprint") from None
        if stream.hex() != self.manifest.fingerprint:
            raise self._corrupt("its chunk list does not match its whole-stream fingerprint")

    def _missing(self, entry: ChunkEntry) -> CheckpointCorruptError:
        return self._corrupt(
            f"chunk {entry.index} ({entry.key}) is missing from the store",
            chunk=entry.index,
            key=entry.key,
            reason="missing",
        )

    def _fetch(self, run: list[ChunkEntry]) -> list[bytes | bytearray]:
        """Read a run of chunks (one object, or adjacent ranges of one pack) and open each."""
        first, last = run[0], run[-1]
        key = chunk_key(self.job_id, first.key)
        try:
            if first.offset is None:
                data: bytes = self.objects.get(key)
                base = 0
            else:
                base = first.offset
                data = self.objects.get_range(key, base, (last.offset or 0) + last.stored_size)
        except FileNotFoundError:
            raise self._missing(first) from None
        if first.offset is not None and not data and not self._exists(key):
            # Some stores answer a ranged read of a missing object with nothing, not an error.
            raise self._missing(first)
        view = memoryview(data)
        out: list[bytes | bytearray] = []
        for entry in run:
            start = 0 if entry.offset is None else entry.offset - base
            piece = view[start : start + entry.stored_size] if entry.offset is not None else view
            out.append(
                open_chunk(
                    self._keys,
                    piece,
                    entry=entry,
                    checkpoint_id=self.checkpoint_id,
                    algorithm=self.manifest.fingerprint_algorithm,
                )
            )
        return out

    def _exists(self, key: str) -> bool:
        return self.objects.exists(key)

    def _runs(self) -> Iterator[list[ChunkEntry]]:
        """The manifest's chunks grouped into reads: adjacent ranges of one pack become one ranged
        read (a resume makes few large requests, like the upload; a pack bounds the size)."""
        run: list[ChunkEntry] = []
        for entry in self.manifest.chunks:
            if run and (
                entry.offset is None
                or run[-1].offset is None
                or entry.key != run[-1].key
                or entry.offset != run[-1].offset + run[-1].stored_size
            ):
                yield run
                run = []
            run.append(entry)
        if run:
            yield run

    def iter_chunks(self, *, window: int | None = None) -> Iterator[bytes | bytearray]:
        """Each chunk's plaintext, in order, each authenticated before it is yielded.

        Up to ``window`` reads (default: twice the parallelism) are fetched ahead, each at most a
        pack's worth of adjacent chunks. If a chunk fails, the error is raised in its turn and
        nothing after it is yielded.
        """
        ahead = window or 2 * self._parallelism
        runs = self._runs()
        with ThreadPoolExecutor(self._parallelism, thread_name_prefix="portal-read") as pool:
            pending: deque[Future[list[bytes | bytearray]]] = deque()
            exhausted = False
            try:
                while not exhausted or pending:
                    while not exhausted and len(pending) < ahead:
                        run = next(runs, None)
                        if run is None:
                            exhausted = True
                        else:
                            pending.append(pool.submit(self._fetch, run))
                    if pending:
                        yield from pending.popleft().result()
            finally:
                for future in pending:
                    future.cancel()

    def verify(self) -> None:
        """Fetch and verify every chunk, keeping nothing. Raises on the first problem."""
        for _ in self.iter_chunks():
            pass

    def read_all(self) -> bytes:
        """The whole plaintext, returned only once every chunk is verified."""
        return b"".join(self.iter_chunks())

    def open(self, *, spool_dir: str | None = None) -> IO[bytes]:
        """A file of the whole verified stream (on local disk, not in memory), at offset 0.

        Nothing is returned until every chunk has been verified, so ``pickle.load(reader.open())``
        never sees a byte of a checkpoint that is damaged anywhere.
        """
        spool = tempfile.TemporaryFile(dir=spool_dir)  # noqa: SIM115 (returned open)
        try:
            for data in self.iter_chunks():
                spool.write(data)
            spool.seek(0)
        except BaseException:
            spool.close()
            raise
        return spool

    def stream(self) -> io.BufferedReader:
        """A streaming file over :meth:`iter_chunks` (each chunk authenticated, bounded memory)."""
        return io.BufferedReader(_ChunkStream(self.iter_chunks()), buffer_size=1 << 20)


class _ChunkStream(io.RawIOBase):
    def __init__(self, chunks: Iterator[bytes | bytearray]) -> None:
        self._chunks = chunks
        self._current = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._current:
            try:
                self._current = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._current))
        buffer[:n] = self._current[:n]
        self._current = self._current[n:]
        return n
