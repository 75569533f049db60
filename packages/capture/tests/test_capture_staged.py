"""Staged buffers (a GPU storage's bytes fetched a chunk at a time while the image is written) and
the multi-threaded CRC-32 that writes and verifies large images: the file is byte for byte the
one an in-memory image writes, and the joined CRC is zlib's."""

from __future__ import annotations

import copyreg
import os
import pickle
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.capture import crc, image, staged
from portal.capture.image import CheckpointImage, Header, InterpreterInfo, read_image, write_image
from portal.capture.pickler import dumps


class Chunked:
    """A staged buffer over bytes in memory that hands out each chunk in one reused bytearray
    (as a pinned staging buffer is reused), and scribbles over it once told it is consumed: a
    writer that kept reading a chunk after saying so would write or checksum the scribble."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self.data, self.chunk = data, chunk
        self.nbytes = len(data)
        self.consumed_calls = 0

    def chunks(self, consumed: Callable[[], None]) -> Iterator[memoryview]:
        slot = bytearray(self.chunk)
        try:
            for start in range(0, self.nbytes, self.chunk):
                piece = self.data[start : start + self.chunk]
                slot[: len(piece)] = piece
                yield memoryview(slot)[: len(piece)]
                consumed()
                self.consumed_calls += 1
                slot[:] = b"\xee" * len(slot)
        finally:
            consumed()

    def tobytes(self) -> bytes:
        return self.data


def _header() -> Header:
    return Header(interpreter=InterpreterInfo.current(), script="s.py", argv=[], cwd="/", created=0)


@given(st.binary(max_size=300), st.binary(max_size=300), st.integers(0, 2**32 - 1))
def test_crc32_combine_is_zlibs(a: bytes, b: bytes, seed: int) -> None:
    assert crc.crc32_combine(zlib.crc32(a, seed), zlib.crc32(b), len(b)) == zlib.crc32(a + b, seed)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.binary(max_size=2000), max_size=12), st.integers(1, 4), st.integers(0, 2**32 - 1)
)
def test_parallel_crc_equals_one_pass(pieces: list[bytes], workers: int, seed: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(crc, "GROUP_BYTES", 700)  # many groups, cut inside pieces
        parallel = crc.ParallelCrc(seed, workers=workers)
        for piece in pieces:
            parallel.feed(memoryview(piece))
        assert parallel.result() == zlib.crc32(b"".join(pieces), seed)


def test_a_staged_buffer_writes_the_same_file_as_bytes_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crc, "GROUP_BYTES", 1000)
    data = os.urandom(50_000)
    chunked = Chunked(data, chunk=4096)
    staged_file, plain_file = tmp_path / "staged.portal", tmp_path / "plain.portal"
    size = write_image(
        CheckpointImage(header=_header(), pickle=b"p", buffers=[memoryview(b"ab"), chunked]),
        staged_file,
    )
    write_image(
        CheckpointImage(
            header=_header(), pickle=b"p", buffers=[memoryview(b"ab"), memoryview(data)]
        ),
        plain_file,
    )
    assert staged_file.read_bytes() == plain_file.read_bytes()
    assert size == staged_file.stat().st_size
    assert chunked.consumed_calls == -(-len(data) // 4096)
    monkeypatch.setattr(image, "PARALLEL_CRC_BYTES", 1)  # verified on several threads
    back = read_image(staged_file)
    assert [bytes(b) for b in back.buffers] == [b"ab", data]
    chunks = b"".join(
        bytes(c)
        for c in image.iter_image_chunks(
            CheckpointImage(header=_header(), pickle=b"p", buffers=[memoryview(b"ab"), chunked])
        )
    )
    assert chunks == plain_file.read_bytes()


def test_a_damaged_large_image_is_caught_by_the_parallel_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crc, "GROUP_BYTES", 1000)
    monkeypatch.setattr(image, "PARALLEL_CRC_BYTES", 1)
    path = tmp_path / "c.portal"
    write_image(
        CheckpointImage(header=_header(), pickle=b"p", buffers=[memoryview(os.urandom(20_000))]),
        path,
    )
    raw = bytearray(path.read_bytes())
    raw[-5000] ^= 1
    path.write_bytes(raw)
    with pytest.raises(image.CheckpointCorruptError, match="checksum"):
        read_image(path)


class _Lazy:
    """An object whose reduction hands its bytes to the pickle as a staged buffer."""

    def __init__(self, data: bytes) -> None:
        self.data = data


def _reduce_lazy(obj: _Lazy) -> Any:
    return (bytes, (staged.pickle_buffer(Chunked(obj.data, chunk=3)),))


def test_the_pickle_lists_a_staged_buffer_in_its_place(tmp_path: Path) -> None:
    copyreg.pickle(_Lazy, _reduce_lazy)
    try:
        data, buffers, size = dumps([b"x", _Lazy(b"staged bytes")], namespaces={})
    finally:
        copyreg.dispatch_table.pop(_Lazy)
    assert isinstance(buffers[0], Chunked) and size == len(data) + len(b"staged bytes")
    path = tmp_path / "c.portal"
    write_image(CheckpointImage(header=_header(), pickle=data, buffers=buffers), path)
    back = read_image(path)
    assert pickle.loads(back.pickle, buffers=back.buffers) == [b"x", b"staged bytes"]


def test_a_storage_off_the_cpu_is_staged_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The staging pipeline of a GPU storage, run on a CPU storage (no CUDA here): chunks in
    order, the slot refilled only after ``consumed``, the same bytes."""
    torch = pytest.importorskip("torch")
    from portal.capture.extensions import tensors

    monkeypatch.setattr(tensors, "STAGING_CHUNK", 1000)
    values = torch.arange(2_600, dtype=torch.float32)
    buffer = tensors.DeviceBuffer(values.untyped_storage())
    calls: list[int] = []
    received = bytearray()

    def consumed() -> None:
        calls.append(len(received))

    for chunk in buffer.chunks(consumed):
        received.extend(chunk)
    got = bytes(received)
    assert got == values.numpy().tobytes() and buffer.tobytes() == got
    assert calls[:-1] == [1000 * k for k in range(1, 10)]  # before each refill, then at the end


def _rss_file() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssFile:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssFile in /proc/self/status")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's /proc")
def test_a_large_image_is_verified_without_holding_its_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parallel check gives each mapped piece's pages back once checksummed: a restore of
    GPU-sized state does not hold the whole file resident. The bytes read later are intact."""
    monkeypatch.setattr(image, "PARALLEL_CRC_BYTES", 1)
    data = os.urandom(1 << 20) * 96
    path = tmp_path / "big.portal"
    write_image(CheckpointImage(header=_header(), pickle=b"p", buffers=[memoryview(data)]), path)
    before = _rss_file()
    back = read_image(path)
    assert _rss_file() - before < 32 << 20
    assert back.buffers[0] == data  # faulted in again from the file
    image.release_pages(back.buffers[0][5:])
    assert back.buffers[0] == data
    plain = memoryview(bytearray(b"x" * (1 << 16)))
    image.release_pages(plain)  # bytes in memory are never given back
    assert plain == b"x" * (1 << 16)
