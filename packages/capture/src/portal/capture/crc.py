"""CRC-32 of a checkpoint's bytes on several threads, joined into the one CRC the file carries.

A checkpoint of GPU state is many gigabytes; one thread of ``zlib.crc32`` checksums about 3 GB/s,
slower than a GPU copies and about as slow as a disk writes, so on one thread the checksum alone
would set the pace of a save and a restore. zlib releases the GIL for large inputs, so the bytes
are cut into groups that worker threads checksum at once, and the groups' CRCs are joined in order
with :func:`crc32_combine` (zlib's own ``crc32_combine``, which Python's ``zlib`` does not offer).
The result is the same number ``zlib.crc32`` gives over the whole stream: the file format is
unchanged.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cache

__all__ = ["GROUP_BYTES", "ParallelCrc", "crc32_combine"]

#: Bytes checksummed by one task: large enough that a task's overhead is nothing, small enough
#: that a few gigabytes make work for every worker.
GROUP_BYTES = 32 << 20
_POLY = 0xEDB88320  # CRC-32's reflected polynomial


def _times(matrix: Sequence[int], vector: int) -> int:
    """A 32x32 matrix over GF(2) (32 column words) times a 32-bit vector."""
    total = 0
    index = 0
    while vector:
        if vector & 1:
            total ^= matrix[index]
        vector >>= 1
        index += 1
    return total


def _square(matrix: Sequence[int]) -> list[int]:
    return [_times(matrix, column) for column in matrix]


@cache
def _zero_byte_powers() -> tuple[tuple[int, ...], ...]:
    """Entry k: the operator that appends 2**k zero bytes to a CRC-32 register (k < 64)."""
    one_bit = [_POLY] + [1 << n for n in range(31)]  # one zero bit through the register
    operator = _square(_square(_square(one_bit)))  # eight bits: one byte
    powers = []
    for _ in range(64):
        powers.append(tuple(operator))
        operator = _square(operator)
    return tuple(powers)


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of ``A + B`` from ``crc1 = crc32(A)``, ``crc2 = crc32(B)`` and ``len(B)``.

    Shifting ``crc1`` past ``len2`` zero bytes applies one precomputed operator per set bit of
    ``len2`` (zlib's method, with the powers kept), so a join costs microseconds."""
    if len2 <= 0:
        return crc1
    powers = _zero_byte_powers()
    bit = 0
    while len2:
        if len2 & 1:
            crc1 = _times(powers[bit], crc1)
        len2 >>= 1
        bit += 1
    return crc1 ^ crc2


def _crc_of(views: list[memoryview], after: Callable[[memoryview], object] | None) -> int:
    crc = 0
    for view in views:
        crc = zlib.crc32(view, crc)
        if after is not None:
            after(view)
    return crc


class ParallelCrc:
    """The CRC-32 of the bytes fed to it in order, checksummed by a pool of threads.

    ``feed`` only queues: a view fed must keep its bytes until :meth:`drain` (or
    :meth:`result`) returns. A writer that reuses a staging buffer calls ``drain`` before it
    refills the buffer. ``after`` is called with each piece once it is checksummed (a reader
    gives back the pages of a mapped file)."""

    def __init__(
        self,
        crc: int = 0,
        *,
        workers: int | None = None,
        after: Callable[[memoryview], object] | None = None,
    ) -> None:
        self.crc = crc
        self._after = after
        count = workers if workers is not None else min(8, os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(max(1, count), thread_name_prefix="portal-crc")
        self._pending: list[tuple[Future[int], int]] = []
        self._group: list[memoryview] = []
        self._group_bytes = 0

    def feed(self, view: memoryview) -> None:
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        for start in range(0, len(view), GROUP_BYTES):
            piece = view[start : start + GROUP_BYTES]
            self._group.append(piece)
            self._group_bytes += len(piece)
            if self._group_bytes >= GROUP_BYTES:
                self._submit()

    def _submit(self) -> None:
        if self._group:
            future = self._pool.submit(_crc_of, self._group, self._after)
            self._pending.append((future, self._group_bytes))
            self._group, self._group_bytes = [], 0

    def drain(self) -> int:
        """Wait until every byte fed so far is checksummed; the CRC so far."""
        self._submit()
        for future, length in self._pending:
            self.crc = crc32_combine(self.crc, future.result(), length)
        self._pending.clear()
        return self.crc

    def result(self) -> int:
        """The CRC of everything fed; the pool is shut down."""
        try:
            return self.drain()
        finally:
            self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
