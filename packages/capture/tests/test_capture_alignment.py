"""Buffers restored at their captured address modulo 64 (``portal.capture.alignment``): the same
bytes at another alignment take another SIMD path through numpy's reductions, and a resumed run's
sums drift from the uninterrupted run's in their last digits.

Units: every buffer of an image, mapped from its file or read from a pipe, and every array
restored over it, at its captured remainder (hypothesis over remainders and sizes); a rank set's
parts keep their buffers' alignment; an image with no buffers is still written as version 1.
End to end: a script's float64 state behind an odd-sized buffer, paused and resumed, prints the
sums of the uninterrupted run, and the remainder it had before the pause.
"""

from __future__ import annotations

import os
import pickle
import threading
from pathlib import Path
from typing import Any

import pytest
from _harness import pause_at_line, plain_run, resume_noted
from hypothesis import given, settings
from hypothesis import strategies as st

np = pytest.importorskip("numpy")

from portal.capture._plugins import load_reducers  # noqa: E402
from portal.capture.alignment import ALIGN, aligned_bytearray, remainder_of  # noqa: E402
from portal.capture.image import (  # noqa: E402
    CheckpointImage,
    Header,
    InterpreterInfo,
    read_image,
    write_image,
)
from portal.capture.pickler import dumps, resolve_reducers  # noqa: E402
from portal.runtime.rankset import PartEntry, part_span, write_set  # noqa: E402


def _header(**changes: Any) -> Header:
    return Header(
        interpreter=InterpreterInfo.current(), script="s.py", argv=[], cwd="/", created=0, **changes
    )


def _array_at(remainder: int, values: Any) -> Any:
    """``values`` copied into an array whose data starts at ``remainder`` modulo 64."""
    values = np.ascontiguousarray(values)
    raw = aligned_bytearray(values.nbytes, remainder)
    array = np.frombuffer(raw, dtype=values.dtype).reshape(values.shape)
    array[...] = values
    return array


def _image_of(obj: Any) -> CheckpointImage:
    """``obj`` pickled as a checkpoint pickles it, each buffer's alignment taken as the
    snapshot takes it."""
    data, buffers, _ = dumps(obj, namespaces={}, reducers=resolve_reducers(load_reducers()))
    return CheckpointImage(
        header=_header(),
        pickle=data,
        buffers=buffers,
        alignments=[remainder_of(b) for b in buffers],
    )


def _through_a_pipe(image: CheckpointImage, tmp_path: Path) -> CheckpointImage:
    """``image`` written to a file, read back through a FIFO (read into memory, not mapped)."""
    path = tmp_path / "ck.portal"
    write_image(image, path)
    fifo = tmp_path / "ck.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as out:
            out.write(path.read_bytes())

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        return read_image(fifo)
    finally:
        writer.join()


sizes_and_remainders = st.lists(
    st.tuples(st.integers(1, 300), st.integers(0, ALIGN - 1)), min_size=1, max_size=6
)


@settings(max_examples=40, deadline=None)
@given(layout=sizes_and_remainders, mapped=st.booleans())
def test_every_buffer_comes_back_at_its_captured_remainder(
    layout: list[tuple[int, int]], mapped: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp_path = tmp_path_factory.mktemp("aligned")
    arrays = [_array_at(r, np.arange(n, dtype=np.uint8)) for n, r in layout]
    image = _image_of(arrays)
    assert [remainder_of(b) for b in image.buffers] == [r for _, r in layout]
    if mapped:
        write_image(image, tmp_path / "ck.portal")
        back = read_image(tmp_path / "ck.portal")
    else:
        back = _through_a_pipe(image, tmp_path)
    assert back.header.format_version == 2
    assert [remainder_of(b) for b in back.buffers] == [r for _, r in layout]
    restored = pickle.loads(back.pickle, buffers=back.buffers)
    for array, original, (_, remainder) in zip(restored, arrays, layout, strict=True):
        assert array.ctypes.data % ALIGN == remainder
        assert np.array_equal(array, original)


@settings(max_examples=25, deadline=None)
@given(
    remainder=st.sampled_from([0, 8, 16, 24, 32, 48]),
    before=st.integers(1, 63),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_restored_array_sums_bit_for_bit(
    remainder: int, before: int, seed: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An 8-aligned float64 array behind a buffer of odd size: at the offset a file without
    padding gave it (not even 8-aligned), numpy's sum differed in its last digits."""
    tmp_path = tmp_path_factory.mktemp("sums")
    values = np.random.default_rng(seed).random(100_003) * 1000
    state = _array_at(remainder, values)
    odd = np.arange(before, dtype=np.uint8)
    write_image(_image_of([odd, state]), tmp_path / "ck.portal")
    back = read_image(tmp_path / "ck.portal")
    _, restored = pickle.loads(back.pickle, buffers=back.buffers)
    assert restored.ctypes.data % ALIGN == remainder
    assert restored.sum().tobytes() == state.sum().tobytes()
    assert (restored * 1.5).cumsum().tobytes() == (state * 1.5).cumsum().tobytes()


def test_a_rank_sets_parts_keep_their_buffers_alignment(tmp_path: Path) -> None:
    from portal.capture.distributed.record import RankRecord

    parts, wanted = [], []
    for rank, remainder in enumerate([8, 40]):
        record = RankRecord(rank=rank, world_size=2, backend="gloo", timeout_s=60.0)
        image = _image_of([np.arange(rank + 5, dtype=np.uint8), _array_at(remainder, np.ones(9))])
        image = CheckpointImage(
            header=_header(rank=record),
            pickle=image.pickle,
            buffers=image.buffers,
            alignments=image.alignments,
        )
        wanted.append([remainder_of(b) for b in image.buffers])
        parts.append(tmp_path / f"part{rank}.portal")
        write_image(image, parts[-1])
    target = tmp_path / "set.portal"
    entries = [
        PartEntry(rank=r, bytes=p.stat().st_size, paused_at="t.py:1") for r, p in enumerate(parts)
    ]
    write_set(parts, entries, target, round_=0)
    for rank in range(2):
        offset, _ = part_span(target, rank)
        assert offset % ALIGN == 0
        back = read_image(target, span=part_span(target, rank))
        assert [remainder_of(b) for b in back.buffers] == wanted[rank]


def test_an_image_without_buffers_is_written_as_version_1(tmp_path: Path) -> None:
    """Nothing to align: the file is the layout older readers know."""
    write_image(CheckpointImage(header=_header(), pickle=b"state"), tmp_path / "ck.portal")
    back = read_image(tmp_path / "ck.portal")
    assert back.header.format_version == 1 and back.header.buffer_pads == []
    assert bytes(back.pickle) == b"state"


SCRIPT = """\
import time
import numpy as np

odd = np.arange(13, dtype=np.uint8)  # out of band before the state, 13 bytes long
state = np.random.default_rng(0).random(200_003) * 1000
for step in range(80):
    state += 0.5
    print(f"step {step} {state.ctypes.data % 64} {state.sum()!r} {odd.sum()}", flush=True)
    time.sleep(0.02)
"""


def test_a_resumed_script_sums_as_the_uninterrupted_one(tmp_path: Path) -> None:
    script = tmp_path / "sums.py"
    script.write_text(SCRIPT)
    plain = plain_run(script)
    assert plain.returncode == 0, plain.stderr.decode()
    first, ckpt = pause_at_line(script, line=b"step 10", cwd=tmp_path)
    rest, err, _ = resume_noted(ckpt, tmp_path)
    # Each process's allocator picks the state's first address: the remainder it printed
    # stays the same across the resume, and every sum is the uninterrupted run's.
    remainders = {line.split()[2] for line in (first + rest).splitlines()}
    assert len(remainders) == 1, (first + rest).decode()[-2000:]
    assert _sums(first + rest) == _sums(plain.stdout), err.decode()[-2000:]


def _sums(out: bytes) -> list[bytes]:
    """Each line without the remainder its process's allocator gave the state."""
    return [b" ".join(line.split()[:2] + line.split()[3:]) for line in out.splitlines()]
