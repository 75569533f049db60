"""The checkpoint image: its header, its one pickle, its out-of-band buffers, and a file format.

A :class:`CheckpointImage` lives in memory; the storage layer streams the very same bytes
(:func:`iter_image_chunks`) to cloud storage, so writing never needs the whole file as one
``bytes``. The local file layout, version 1::

    b"PORTALCK" | u32 header length | header (JSON) | pickle | buffer 0 | buffer 1 | ...
    | b"PORTALND" | u32 CRC-32 of every byte before the end marker

All integers little-endian. The header lists the lengths that follow, so a reader knows a
truncated file at once. The header is a msgspec struct evolved by msgspec's rules (new fields get
defaults; none is reordered or retyped) so old checkpoints stay readable; ``format_version`` says
which readers may open the file, and a newer one is refused by name.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import sys
import sysconfig
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
import msgspec

from portal.capture.errors import (
    CheckpointCorruptError,
    CheckpointFormatTooNewError,
    CheckpointUnreadableError,
    DebugBuildError,
    PythonVersionMismatchError,
    UnsupportedInterpreterError,
)
from portal.core.wire import ProblemRecord

__all__ = [
    "FORMAT_VERSION",
    "CheckpointImage",
    "Header",
    "InterpreterInfo",
    "ModuleRef",
    "ProblemRecord",
    "check_interpreter",
    "check_resumable_here",
    "iter_image_chunks",
    "read_image",
    "write_image",
]

FORMAT_VERSION = 1
MAGIC = b"PORTALCK"
END_MAGIC = b"PORTALND"
_U32 = struct.Struct("<I")
_MAX_HEADER = 64 << 20


class InterpreterInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The interpreter a checkpoint was written by; a resume needs the same bytecode."""

    implementation: str
    version: str  # "3.11.7"
    minor: str  # "3.11"
    bytecode_magic: str  # importlib's MAGIC_NUMBER, hex
    debug_build: bool
    pointer_bits: int
    build: str = ""  # sys.version: compiler and build date, for diagnosis

    @classmethod
    def current(cls) -> InterpreterInfo:
        vi = sys.version_info
        return cls(
            implementation=sys.implementation.name,
            version=f"{vi.major}.{vi.minor}.{vi.micro}",
            minor=f"{vi.major}.{vi.minor}",
            bytecode_magic=importlib.util.MAGIC_NUMBER.hex(),
            debug_build=hasattr(sys, "gettotalrefcount")
            or bool(sysconfig.get_config_var("Py_DEBUG")),
            pointer_bits=struct.calcsize("P") * 8,
            build=sys.version,
        )


class ModuleRef(msgspec.Struct, frozen=True, kw_only=True):
    """A user module restored by value: its name and source file."""

    name: str
    file: str | None = None


class Header(msgspec.Struct, frozen=True, kw_only=True):
    """Everything about a checkpoint but its state."""

    format_version: int = FORMAT_VERSION
    interpreter: InterpreterInfo
    script: str
    argv: list[str]
    cwd: str
    created: float
    paused_at: str = ""  # "train.py:42 in train"
    safe_point_time: float = 0.0  # unix time the safe point was reached
    requested_time: float = 0.0  # unix time the pause was requested
    imports: list[str] = msgspec.field(default_factory=list)
    user_modules: list[ModuleRef] = msgspec.field(default_factory=list)
    problems: list[ProblemRecord] = msgspec.field(default_factory=list)
    pickle_length: int = 0
    buffer_lengths: list[int] = msgspec.field(default_factory=list)


class _VersionProbe(msgspec.Struct):
    format_version: int


_encode_header = msgspec.json.Encoder().encode
_decode_header = msgspec.json.Decoder(Header).decode
_decode_version = msgspec.json.Decoder(_VersionProbe).decode


@attrs.frozen(kw_only=True)
class CheckpointImage:
    """A checkpoint in memory: header, the main pickle and its out-of-band buffers."""

    header: Header
    pickle: bytes | memoryview
    buffers: Sequence[memoryview] = ()

    @property
    def nbytes(self) -> int:
        """The size of the whole file this image writes."""
        head = len(_encode_header(self._sealed_header()))
        return len(MAGIC) + 4 + head + len(self.pickle) + sum(b.nbytes for b in self.buffers) + 12

    def _sealed_header(self) -> Header:
        return msgspec.structs.replace(
            self.header,
            pickle_length=len(self.pickle),
            buffer_lengths=[b.nbytes for b in self.buffers],
        )


def iter_image_chunks(image: CheckpointImage) -> Iterator[bytes | memoryview]:
    """The file's bytes as a stream of chunks; buffers are yielded without copying."""
    header = _encode_header(image._sealed_header())
    crc = 0
    for chunk in (MAGIC + _U32.pack(len(header)) + header, image.pickle, *image.buffers):
        view = memoryview(chunk).cast("B")
        crc = zlib.crc32(view, crc)
        yield view
    yield END_MAGIC + _U32.pack(crc)


def write_image(image: CheckpointImage, path: str | os.PathLike[str]) -> int:
    """Write ``image`` to ``path`` atomically (temporary file, fsync, rename); return its size."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    size = 0
    try:
        with open(tmp, "wb") as fh:
            for chunk in iter_image_chunks(image):
                fh.write(chunk)
                size += len(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size


def read_image(path: str | os.PathLike[str]) -> CheckpointImage:
    """Read and verify a checkpoint file. Buffers come back writable (arrays restored from them
    stay writable, as they were)."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below, errors mapped
    except OSError as exc:
        raise CheckpointUnreadableError(
            f"cannot read checkpoint {os.fspath(path)!r}: {exc.strerror or exc}. Check the path "
            "and that this user may read it"
        ) from exc
    with fh:
        return _read_from(fh, os.fspath(path))


def _corrupt(path: str, why: str) -> CheckpointCorruptError:
    return CheckpointCorruptError(
        f"checkpoint {path!r} is not an intact Portal checkpoint: {why}. It cannot be resumed; "
        "resume from another copy (storage keeps the uploaded one) or the previous checkpoint"
    )


def _read_exact(fh: object, n: int, path: str, what: str) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = fh.readinto(view[got:])  # type: ignore[attr-defined]
        if not k:
            raise _corrupt(path, f"it ends inside the {what} (truncated)")
        got += k
    return buf


def _read_from(fh: object, path: str) -> CheckpointImage:
    prefix = fh.read(len(MAGIC) + 4)  # type: ignore[attr-defined]
    if len(prefix) < len(MAGIC) + 4 or prefix[: len(MAGIC)] != MAGIC:
        raise _corrupt(path, "it does not start with Portal's checkpoint marker")
    (header_len,) = _U32.unpack(prefix[len(MAGIC) :])
    if header_len > _MAX_HEADER:
        raise _corrupt(path, f"its header length ({header_len} bytes) is implausible")
    raw_header = bytes(_read_exact(fh, header_len, path, "header"))
    crc = zlib.crc32(raw_header, zlib.crc32(prefix))
    try:
        version = _decode_version(raw_header).format_version
    except msgspec.DecodeError as exc:
        raise _corrupt(path, f"its header cannot be decoded ({exc})") from exc
    if version > FORMAT_VERSION:
        raise CheckpointFormatTooNewError(
            f"checkpoint {path!r} has format version {version}, written by a newer portal-capture;"
            f" this one reads up to version {FORMAT_VERSION}. Upgrade portal-capture on this "
            "machine to resume it",
            details={"format_version": version, "supported": FORMAT_VERSION},
        )
    try:
        header = _decode_header(raw_header)
    except msgspec.DecodeError as exc:
        raise _corrupt(path, f"its header is invalid ({exc})") from exc
    payload = _read_exact(fh, header.pickle_length, path, "state")
    crc = zlib.crc32(payload, crc)
    buffers = []
    for i, length in enumerate(header.buffer_lengths):
        buf = _read_exact(fh, length, path, f"buffer {i}")
        crc = zlib.crc32(buf, crc)
        buffers.append(memoryview(buf))
    trailer = fh.read(len(END_MAGIC) + 4)  # type: ignore[attr-defined]
    if len(trailer) != len(END_MAGIC) + 4 or trailer[: len(END_MAGIC)] != END_MAGIC:
        raise _corrupt(path, "its end marker is missing (truncated or appended to)")
    if _U32.unpack(trailer[len(END_MAGIC) :])[0] != crc:
        raise _corrupt(path, "its checksum does not match its contents (altered or damaged)")
    if fh.read(1):  # type: ignore[attr-defined]
        raise _corrupt(path, "it has bytes after its end marker")
    return CheckpointImage(header=header, pickle=bytes(payload), buffers=buffers)


def check_interpreter(info: InterpreterInfo | None = None) -> None:
    """Refuse an interpreter whose frames this engine cannot read or rebuild."""
    info = info or InterpreterInfo.current()
    if info.implementation != "cpython":
        raise UnsupportedInterpreterError(
            f"Portal's capture needs CPython; this is {info.implementation} {info.version}. "
            "Run the job with CPython 3.11, 3.12 or 3.13"
        )
    if info.minor not in ("3.11", "3.12", "3.13"):
        raise UnsupportedInterpreterError(
            f"Portal's capture supports CPython 3.11 to 3.13; this is {info.version}. "
            "Run the job with one of those versions"
        )
    if info.pointer_bits != 64:
        raise UnsupportedInterpreterError(
            f"Portal's capture needs a 64-bit CPython; this one is {info.pointer_bits}-bit. "
            "Run the job with a 64-bit build"
        )
    if info.debug_build:
        raise DebugBuildError(
            f"Portal's capture cannot run on a debug build of CPython ({info.version}, "
            "Py_DEBUG): its frames are laid out differently. Use a release build"
        )


def check_resumable_here(header: Header, path: str = "the checkpoint") -> None:
    """Refuse to resume a checkpoint this interpreter cannot continue."""
    here = InterpreterInfo.current()
    check_interpreter(here)
    there = header.interpreter
    if there.implementation != here.implementation or there.minor != here.minor:
        raise PythonVersionMismatchError(
            f"{path} was written by {there.implementation} {there.version}; this is "
            f"{here.implementation} {here.version}. A checkpoint holds bytecode positions, so it "
            f"resumes only on Python {there.minor}: resume it with a Python {there.minor} "
            "interpreter (the job's image or venv of that version)",
            details={"checkpoint": there.version, "here": here.version},
        )
    if there.bytecode_magic != here.bytecode_magic:
        raise PythonVersionMismatchError(
            f"{path} was written by Python {there.version} whose bytecode (magic "
            f"{there.bytecode_magic}) differs from this Python {here.version}'s "
            f"({here.bytecode_magic}). Resume it with Python {there.version}",
            details={"checkpoint": there.version, "here": here.version},
        )
