"""The node streams a checkpoint to the store while the runtime is still writing it.

A real producer (a thread writing a real checkpoint image the way the runtime does: a temporary
file, then a rename) and a real store on disk; no timing assertions: the producer waits, in the
middle of its image, until the store shows the upload under way.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from portal.capture.image import CheckpointImage, Header, InterpreterInfo, iter_image_chunks
from portal.core.domain import CheckpointState
from portal.node.stream import CheckpointStream, StreamBroken
from portal.storage import CheckpointStore, MemoryKeyStore

JOB = "j-0123456789"


@pytest.fixture
def store(tmp_path: Path) -> Any:
    store = CheckpointStore((tmp_path / "store").as_uri(), MemoryKeyStore())
    store.create_job_key(JOB)
    return store


def image_bytes() -> bytes:
    header = Header(
        interpreter=InterpreterInfo.current(),
        script="/x/train.py",
        argv=["train.py"],
        cwd="/x",
        created=1.0,
    )
    rng = __import__("random").Random(7)
    buffers = [memoryview(rng.randbytes(n)) for n in (3_000_000, 5_000_000)]
    image = CheckpointImage(header=header, pickle=rng.randbytes(2_000_000), buffers=buffers)
    return b"".join(bytes(c) for c in iter_image_chunks(image))


def _until(predicate: Any, what: str) -> None:
    end = time.monotonic() + 60
    while not predicate():
        assert time.monotonic() < end, f"{what} never happened"
        time.sleep(0.01)


def _incomplete(store: Any) -> bool:
    return any(r.state is CheckpointState.INCOMPLETE for r in store.list(JOB))


def produce(target: Path, data: bytes, *, stop_at: int, resume: threading.Event) -> None:
    """Write ``data`` as the runtime does; after ``stop_at`` bytes wait for ``resume``."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as out:
        for start in range(0, len(data), 256 * 1024):
            if start >= stop_at and not resume.is_set():
                out.flush()
                resume.wait(60)
            out.write(data[start : start + 256 * 1024])
            out.flush()
        os.fsync(out.fileno())
    tmp.replace(target)


def test_the_upload_starts_while_the_image_is_written(store: Any, tmp_path: Path) -> None:
    target = tmp_path / "checkpoint.portal"
    data = image_bytes()
    resume = threading.Event()
    stream = CheckpointStream(store, JOB, target, deadline=None, summary={"attempt": 1}).start()
    producer = threading.Thread(
        target=produce, args=(target, data), kwargs={"stop_at": len(data) // 2, "resume": resume}
    )
    producer.start()
    _until(lambda: _incomplete(store), "the upload's start")  # half the image is written
    assert producer.is_alive() and not target.exists()
    resume.set()
    producer.join()
    stream.producer_exited()
    ref = stream.result(timeout_s=60)
    assert ref.state is CheckpointState.COMPLETE
    assert store.open_reader(JOB, ref.checkpoint_id).read_all() == data
    assert store.manifest(JOB, ref.checkpoint_id).summary["bytes"] == len(data)
    assert stream.expected_bytes == len(data)
    assert stream.progress is not None and stream.progress.expected_bytes == len(data)


def test_a_producer_that_stops_short_breaks_the_stream(store: Any, tmp_path: Path) -> None:
    target = tmp_path / "checkpoint.portal"
    data = image_bytes()
    tmp = target.with_name(f".{target.name}.4242.tmp")
    tmp.write_bytes(data[: len(data) // 2])  # the runtime died mid-write
    stream = CheckpointStream(store, JOB, target, deadline=None, summary={}).start()
    _until(lambda: _incomplete(store), "the upload's start")
    stream.producer_exited()
    with pytest.raises(StreamBroken, match="still unwritten"):
        stream.result(timeout_s=60)
    assert store.latest_complete(JOB) is None  # the partial one is never resumable
    assert _incomplete(store)  # and is kept for inspection


def test_altered_bytes_do_not_check_out(store: Any, tmp_path: Path) -> None:
    target = tmp_path / "checkpoint.portal"
    data = bytearray(image_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(data)
    stream = CheckpointStream(store, JOB, target, deadline=None, summary={}).start()
    stream.producer_exited()
    with pytest.raises(StreamBroken, match="checksum"):
        stream.result(timeout_s=60)
    assert store.latest_complete(JOB) is None


def test_cancelled_before_the_runtime_wrote_anything(store: Any, tmp_path: Path) -> None:
    stream = CheckpointStream(
        store, JOB, tmp_path / "checkpoint.portal", deadline=None, summary={}
    ).start()
    stream.cancel()
    with pytest.raises(StreamBroken, match="cancelled"):
        stream.result(timeout_s=10)
    assert store.list(JOB) == []


def _newer_format(data: bytes) -> bytes:
    return data.replace(b'"format_version":1', b'"format_version":9', 1)


def _damaged_header(data: bytes) -> bytes:
    return data.replace(b'"script":', b'"script"!', 1)


@pytest.mark.parametrize(
    ("alter", "reason"),
    [
        (lambda data: b"#!/bin/sh\n" + data[10:], "does not start with Portal's checkpoint marker"),
        (_newer_format, "has format version 9, written by a newer portal-capture"),
        (_damaged_header, "its header cannot be decoded"),
        (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "its checksum does not match"),
    ],
    ids=["not-an-image", "newer-format", "damaged-header", "checksum"],
)
def test_the_stream_and_read_image_refuse_an_image_for_the_same_reason(
    store: Any, tmp_path: Path, alter: Any, reason: str
) -> None:
    """One parser for the image: what the stream refuses, a resume refuses, in the same words."""
    from portal.capture.errors import CheckpointCorruptError, CheckpointFormatTooNewError
    from portal.capture.image import read_image

    target = tmp_path / "checkpoint.portal"
    data = image_bytes()
    assert b'"format_version":1' in data and b'"script":' in data
    target.write_bytes(alter(data))
    with pytest.raises((CheckpointCorruptError, CheckpointFormatTooNewError), match=reason):
        read_image(target)
    stream = CheckpointStream(store, JOB, target, deadline=None, summary={}).start()
    stream.producer_exited()
    with pytest.raises(StreamBroken, match=reason):
        stream.result(timeout_s=60)
    assert store.latest_complete(JOB) is None
