"""The checkpoint image and its file format; interpreter checks."""

from __future__ import annotations

import io
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.capture import errors
from portal.capture.image import (
    FORMAT_VERSION,
    CheckpointImage,
    Header,
    InterpreterInfo,
    ProblemRecord,
    check_interpreter,
    check_resumable_here,
    iter_image_chunks,
    read_image,
    write_image,
)


def _header(**changes: object) -> Header:
    header = Header(
        interpreter=InterpreterInfo.current(),
        script="/x/train.py",
        argv=["train.py"],
        cwd="/x",
        created=1.0,
        problems=[
            ProblemRecord(
                name="fh",
                type_name="_io.TextIOWrapper",
                reason="TypeError: nope",
                where="train.py:3 in f",
            )
        ],
    )
    return msgspec.structs.replace(header, **changes)


@settings(max_examples=40, deadline=None)
@given(
    payload=st.binary(max_size=4096),
    buffers=st.lists(st.binary(max_size=2048), max_size=5),
)
def test_round_trip(
    tmp_path_factory: pytest.TempPathFactory, payload: bytes, buffers: list[bytes]
) -> None:
    path = tmp_path_factory.mktemp("img") / "ck.portal"
    image = CheckpointImage(
        header=_header(), pickle=payload, buffers=[memoryview(b) for b in buffers]
    )
    size = write_image(image, path)
    assert size == path.stat().st_size == image.nbytes
    assert path.read_bytes() == b"".join(bytes(c) for c in iter_image_chunks(image))
    back = read_image(path)
    assert bytes(back.pickle) == payload
    assert [bytes(b) for b in back.buffers] == buffers
    assert all(not b.readonly for b in back.buffers)
    assert back.header.problems == image.header.problems
    assert back.header.buffer_lengths == [len(b) for b in buffers]


def _write(tmp_path: Path, **changes: object) -> Path:
    path = tmp_path / "ck.portal"
    write_image(
        CheckpointImage(
            header=_header(**changes), pickle=b"state" * 100, buffers=[memoryview(b"buf" * 50)]
        ),
        path,
    )
    return path


def test_write_is_atomic_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = _write(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_newer_format_is_refused_by_name(tmp_path: Path) -> None:
    path = _write(tmp_path, format_version=FORMAT_VERSION + 1)
    with pytest.raises(errors.CheckpointFormatTooNewError) as info:
        read_image(path)
    assert info.value.code == "CAPTURE_FORMAT_TOO_NEW"
    assert "Upgrade portal-capture" in info.value.message


@pytest.mark.parametrize("damage", ["flip", "truncate", "append", "not-a-checkpoint", "empty"])
def test_corrupt_files_are_refused(tmp_path: Path, damage: str) -> None:
    path = _write(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x40
    elif damage == "truncate":
        del data[-30:]
    elif damage == "append":
        data += b"junk"
    elif damage == "not-a-checkpoint":
        data = bytearray(b"#!/usr/bin/env python\nprint('hello')\n")
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(errors.CheckpointCorruptError) as info:
        read_image(path)
    assert info.value.code == "CAPTURE_CHECKPOINT_CORRUPT"
    assert str(path) in info.value.message


def test_missing_file_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(errors.CheckpointUnreadableError) as info:
        read_image(tmp_path / "nope.portal")
    assert info.value.code == "CAPTURE_CHECKPOINT_UNREADABLE"


def test_chunks_stream_without_copying_buffers() -> None:
    big = bytearray(1 << 20)
    image = CheckpointImage(header=_header(), pickle=b"p", buffers=[memoryview(big)])
    chunks = list(iter_image_chunks(image))
    assert any(isinstance(c, memoryview) and c.obj is big for c in chunks)
    sink = io.BytesIO()
    for chunk in chunks:
        sink.write(chunk)
    assert len(sink.getvalue()) == image.nbytes


@pytest.mark.parametrize(
    ("changes", "error", "code"),
    [
        (
            {"implementation": "pypy"},
            errors.UnsupportedInterpreterError,
            "CAPTURE_UNSUPPORTED_INTERPRETER",
        ),
        (
            {"minor": "3.10", "version": "3.10.4"},
            errors.UnsupportedInterpreterError,
            "CAPTURE_UNSUPPORTED_INTERPRETER",
        ),
        (
            {"pointer_bits": 32},
            errors.UnsupportedInterpreterError,
            "CAPTURE_UNSUPPORTED_INTERPRETER",
        ),
        ({"debug_build": True}, errors.DebugBuildError, "CAPTURE_DEBUG_BUILD"),
    ],
)
def test_interpreter_refusals(
    changes: dict[str, object], error: type[Exception], code: str
) -> None:
    info = msgspec.structs.replace(InterpreterInfo.current(), **changes)
    with pytest.raises(error) as caught:
        check_interpreter(info)
    assert caught.value.code == code  # type: ignore[attr-defined]


def test_this_interpreter_is_supported() -> None:
    check_interpreter()
    check_resumable_here(_header())


@pytest.mark.parametrize(
    "changes",
    [
        {"minor": "3.10", "version": "3.10.4"},
        {"bytecode_magic": "deadbeef"},
        {"implementation": "pypy"},
    ],
)
def test_other_python_is_refused_at_resume(changes: dict[str, object]) -> None:
    header = _header(interpreter=msgspec.structs.replace(InterpreterInfo.current(), **changes))
    with pytest.raises(errors.PythonVersionMismatchError) as info:
        check_resumable_here(header, "ck.portal")
    assert info.value.code == "CAPTURE_PYTHON_VERSION_MISMATCH"
    assert "resume" in info.value.message.lower()
