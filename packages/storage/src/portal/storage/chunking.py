"""Cutting a checkpoint's byte stream into chunks.

**Fixed-size chunks, plus cut points from the producer.** Why not content-defined chunking:
content-defined cuts must evaluate a rolling hash at every byte. In pure Python the fastest form
measured here (a 64-bit multiply over the stream as one big integer, then ``bytes.find``) runs at
~160 MB/s on one core and holds the GIL, against ~1 GB/s for fingerprinting and ~2 GB/s for
AES-GCM: it would be the slowest stage of the upload on the one path where time is short (a
notice), and numpy is not ours to use. A cheaper byte-pattern trigger (``translate`` + ``find``)
found no cut points at all in float arrays and pickles, so it would silently degrade to fixed
chunks anyway.

Fixed chunks dedup perfectly when bytes change in place (a tensor's values, an optimizer's
moments: the bulk of a large state) and lose alignment only when bytes are inserted or removed
before them. The producer knows where such shifts can happen and where big buffers start, so it
can call :meth:`FixedChunker.cut` (``CheckpointWriter.cut()``) to start a new chunk there: with a
cut before each large buffer, a pickle header that grows by a byte costs one small chunk, not the
whole state. The 1% benchmark (``benchmarks/bench_storage.py``) measures both cases.

**Small chunks, packed.** A chunk is the unit of dedup: a change costs the chunks it touches, so
they are small (256 KiB by default: 1% of a state changed in 16 places re-sends ~1.2-1.8%, against
~11% with 4 MiB chunks). Object stores want the opposite (few requests of several MiB, 8-16 in
flight), so the writer seals chunks one by one and stores them back to back in **packs** of
``DEFAULT_PACK_SIZE`` (one PUT each); the manifest names pack, offset and length per chunk and a
reader fetches runs of them with ranged reads. Below 256 KiB the per-chunk Python work (a
fingerprint call, an encryption call, a manifest entry: ~20 us) starts to show next to the
~0.2 ms the bytes themselves take.

"""

from __future__ import annotations

__all__ = ["DEFAULT_CHUNK_SIZE", "DEFAULT_PACK_SIZE", "FixedChunker"]

DEFAULT_CHUNK_SIZE = 256 * 2**10
DEFAULT_PACK_SIZE = 8 * 2**20
Piece = bytes | memoryview


class FixedChunker:
    """Turns writes of any size into chunks of ``chunk_size`` bytes (the last may be shorter).

    Immutable ``bytes`` and read-only views are sliced without copying; anything writable (a
    ``bytearray`` the caller may reuse) is copied, so a chunk never changes after :meth:`feed`
    returns. (A read-only view of a buffer the caller then changes would be read back as corrupt,
    never silently wrong: every chunk's fingerprint is checked.)
    """

    def __init__(self, chunk_size: int = DEFAULT_CHUNK_SIZE) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1 byte, got {chunk_size}")
        self.chunk_size = chunk_size
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held back until the current chunk is full."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Piece]:
        """Take ``data``; return the chunks it completed."""
        out: list[Piece] = []
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        size = self.chunk_size
        pos = 0
        if self._buffer:
            take = min(size - len(self._buffer), len(view))
            self._buffer += view[:take]
            pos = take
            if len(self._buffer) == size:
                out.append(bytes(self._buffer))
                self._buffer = bytearray()
        zero_copy = view.readonly
        while len(view) - pos >= size:
            piece = view[pos : pos + size]
            out.append(piece if zero_copy else bytes(piece))
            pos += size
        if pos < len(view):
            self._buffer += view[pos:]
        return out

    def cut(self) -> Piece | None:
        """End the current chunk here (``None`` if it is empty)."""
        if not self._buffer:
            return None
        piece = bytes(self._buffer)
        self._buffer = bytearray()
        return piece
