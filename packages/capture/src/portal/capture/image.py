"""The checkpoint image: its header, its one pickle, its out-of-band buffers, and a file format.

A :class:`CheckpointImage` lives in memory; the storage layer streams the very same bytes
(:func:`iter_image_chunks`) to cloud storage, so writing never needs the whole file as one
``bytes``. The local file layout, version 2::

    b"PORTALCK" | u32 header length | header (JSON) | zeros to a multiple of 64 | pickle
    | zeros (pad 0) | buffer 0 | zeros (pad 1) | buffer 1 | ...
    | b"PORTALND" | u32 CRC-32 of every byte before the end marker

Each buffer starts at a file offset with the remainder modulo 64 its memory had when captured
(``buffer_pads`` in the header; :mod:`portal.capture.alignment`), so that a buffer mapped in place
is back at its captured alignment. Version 1, written where no alignment is asked for (an image
with no buffers, say), has neither the header's padding nor the pads: it is version 2 with every
pad zero, and stays readable by older readers.

All integers little-endian. The header lists the lengths that follow, so a reader knows a
truncated file at once. The header is a msgspec struct evolved by msgspec's rules (new fields get
defaults; none is reordered or retyped) so old checkpoints stay readable; ``format_version`` says
which readers may open the file, and a newer one is refused by name.
"""

from __future__ import annotations

import ctypes
import errno
import importlib.util
import mmap
import os
import stat
import struct
import sys
import sysconfig
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import msgspec

from portal.capture.alignment import ALIGN, aligned_bytearray
from portal.capture.crc import ParallelCrc
from portal.capture.distributed.record import RankRecord
from portal.capture.errors import (
    CheckpointCorruptError,
    CheckpointFormatTooNewError,
    CheckpointNoSpaceError,
    CheckpointUnreadableError,
    DebugBuildError,
    PythonVersionMismatchError,
    UnsupportedInterpreterError,
)
from portal.capture.staged import Buffer, StagedBuffer
from portal.core.units import size as size_text
from portal.runtime.protocol import ProblemRecord

__all__ = [
    "FORMAT_VERSION",
    "PADDING",
    "PREFIX_BYTES",
    "SPACE_MARGIN",
    "TRAILER_BYTES",
    "CheckpointImage",
    "Header",
    "ImageLayout",
    "InterpreterInfo",
    "LibraryCode",
    "ModuleRef",
    "ProblemRecord",
    "check_interpreter",
    "check_resumable_here",
    "check_trailer",
    "free_bytes",
    "header_length",
    "iter_image_chunks",
    "read_image",
    "release_pages",
    "write_image",
]

#: The newest layout this module reads (and writes, where buffers are aligned).
FORMAT_VERSION = 2
#: The oldest layout, still written where nothing is aligned (readable by older readers).
_UNALIGNED_VERSION = 1
#: A layout section of zero bytes that places the next one (see :attr:`ImageLayout.sections`).
PADDING = "padding"
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


class LibraryCode(msgspec.Struct, frozen=True, kw_only=True):
    """A library's function (or generator) a checkpoint carries a frame of: the resume refuses
    to continue it unless the installed module has the same code (portal.capture.libraries)."""

    module: str
    qualname: str
    firstlineno: int
    file: str  # the source file's name, for messages
    distribution: str  # "Python" for the standard library, "?" for none found
    version: str
    digest: str


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
    #: Zero bytes before each buffer (version 2): each starts at its captured remainder mod 64.
    buffer_pads: list[int] = msgspec.field(default_factory=list)
    #: A rank's part of a multi-process job's checkpoint: its place in the job, read before its
    #: state loads (the process groups its state refers to are made again first).
    rank: RankRecord | None = None
    #: A multi-process job's checkpoint set: its number of ranks, each part one buffer in rank
    #: order, the manifest the state section (see ``portal.runtime.group``); 0 for one process.
    ranks: int = 0
    #: Library code whose frames or generators the state carries (checked before it loads).
    libraries: list[LibraryCode] = msgspec.field(default_factory=list)


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
    #: Bytes in memory, or staged (a GPU storage's, fetched a chunk at a time while writing).
    buffers: Sequence[Buffer] = ()
    #: Each buffer's address modulo 64 when captured, which the file keeps (empty: not kept,
    #: a version 1 file). Taken at the capture: a held copy of a buffer lies elsewhere.
    alignments: Sequence[int] = ()

    @property
    def nbytes(self) -> int:
        """The size of the whole file this image writes."""
        header = self._sealed_header()
        head = PREFIX_BYTES + len(_encode_header(header))
        return (
            head
            + _head_pad(head, header)
            + len(self.pickle)
            + sum(header.buffer_pads)
            + sum(b.nbytes for b in self.buffers)
            + TRAILER_BYTES
        )

    def _sealed_header(self) -> Header:
        lengths = [b.nbytes for b in self.buffers]
        pads: list[int] = []
        if self.buffers and len(self.alignments) == len(self.buffers):
            at = len(self.pickle)  # from the data's start, itself at a multiple of ALIGN
            for want, length in zip(self.alignments, lengths, strict=True):
                pads.append((want - at) % ALIGN)
                at += pads[-1] + length
        version = FORMAT_VERSION if pads else _UNALIGNED_VERSION
        if self.header.format_version > FORMAT_VERSION:
            version = self.header.format_version  # a newer writer's (as tests make one)
        return msgspec.structs.replace(
            self.header,
            format_version=version,
            pickle_length=len(self.pickle),
            buffer_lengths=lengths,
            buffer_pads=pads,
        )


def _head_pad(head: int, header: Header) -> int:
    """Zero bytes after the prefix and header (``head`` bytes), before the pickle: the data
    starts at a multiple of ALIGN in a version 2 file, so the buffers' pads are the header's
    own business (its length changes with them)."""
    return (-head) % ALIGN if header.buffer_pads else 0


def _image_parts(image: CheckpointImage) -> list[Buffer]:
    """Everything before the end marker: flat byte views (buffers are not copied), and the
    staged buffers as they are."""
    sealed = image._sealed_header()
    header = _encode_header(sealed)
    head = MAGIC + _U32.pack(len(header)) + header
    parts: list[Any] = [head + bytes(_head_pad(len(head), sealed)), image.pickle]
    for pad, buffer in zip(
        sealed.buffer_pads or [0] * len(image.buffers), image.buffers, strict=True
    ):
        if pad:
            parts.append(bytes(pad))
        parts.append(buffer)
    return [
        part if isinstance(part, StagedBuffer) else memoryview(part).cast("B") for part in parts
    ]


def iter_image_chunks(image: CheckpointImage) -> Iterator[bytes | memoryview]:
    """The file's bytes as a stream of chunks; buffers in memory are yielded without copying,
    a staged buffer's chunks as copies (a consumer may keep a chunk for a while)."""
    crc = 0
    for part in _image_parts(image):
        if isinstance(part, memoryview):
            crc = zlib.crc32(part, crc)
            yield part
            continue
        for chunk in part.chunks(lambda: None):
            copy = bytes(chunk)
            crc = zlib.crc32(copy, crc)
            yield copy
    yield END_MAGIC + _U32.pack(crc)


#: Large buffers are written (and checksummed) in slices of this size, so the two overlap.
WRITE_SLICE = 64 << 20
#: Images whose buffers hold at least this many bytes are checksummed on several threads.
PARALLEL_CRC_BYTES = 64 << 20


#: Room a checkpoint leaves free on its filesystem: the job's own output (its stdout and stderr
#: files are often on the same disk) must never die for a checkpoint's sake.
SPACE_MARGIN = 16 << 20


def free_bytes(folder: str | os.PathLike[str]) -> int | None:
    """Bytes an unprivileged writer may still use on ``folder``'s filesystem (None: unknown)."""
    try:
        st = os.statvfs(folder)
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


def _no_space(
    target: Path, needed: int, free: int | None, *, during: bool
) -> CheckpointNoSpaceError:
    how = "filled up while it was written" if during else "has no room for it"
    room = "" if free is None else f", {size_text(free)} free"
    return CheckpointNoSpaceError(
        f"the disk holding {target.parent} {how}: the checkpoint needs {size_text(needed)}"
        f" (and {size_text(SPACE_MARGIN)} kept free for the job's output){room}; nothing "
        "was written. Free space there, or put PORTAL_HOME on a larger disk",
        details={"path": str(target), "needed_bytes": needed, "free_bytes": free},
    )


def write_image(image: CheckpointImage, path: str | os.PathLike[str], *, sync: bool = True) -> int:
    """Write ``image`` to ``path`` atomically (temporary file, fsync, rename); return its size.
    ``sync=False`` leaves out the fsync, for a file only ever copied into one that is synced
    (a rank's part of a checkpoint set).

    The same bytes as :func:`iter_image_chunks`. The checksum runs on worker threads alongside
    the writes (zlib and file writes both release the GIL, so it costs no wall time), and a
    staged buffer's next chunk is fetched (a GPU copy) while the last one is written.

    A disk without room for the whole image (plus :data:`SPACE_MARGIN`) is refused before a byte
    is written, and a disk that fills meanwhile (another writer) loses the partial file at once:
    :class:`CheckpointNoSpaceError` either way, naming the need and the free space."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    needed = image.nbytes
    free = free_bytes(target.parent)
    if free is not None and free < needed + SPACE_MARGIN:
        raise _no_space(target, needed, free, during=False)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    size = 0
    crc = ParallelCrc(workers=min(4, os.cpu_count() or 1))
    try:
        with open(tmp, "wb") as fh:
            try:
                for part in _image_parts(image):
                    pieces: Iterable[memoryview] = (
                        part.chunks(crc.drain)
                        if isinstance(part, StagedBuffer)
                        else (
                            part[start : start + WRITE_SLICE]
                            for start in range(0, len(part), WRITE_SLICE)
                        )
                    )
                    for piece in pieces:
                        crc.feed(piece)
                        fh.write(piece)
                        size += len(piece)
            finally:
                checksum = crc.result()
            fh.write(END_MAGIC + _U32.pack(checksum))
            size += len(END_MAGIC) + 4
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC and not isinstance(exc, CheckpointNoSpaceError):
            raise _no_space(target, needed, free_bytes(target.parent), during=True) from exc
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size


def read_image(
    path: str | os.PathLike[str], *, span: tuple[int, int] | None = None
) -> CheckpointImage:
    """Read and verify a checkpoint file. Buffers come back writable (arrays restored from them
    stay writable, as they were).

    A regular file is *mapped* copy-on-write rather than read: its buffers are views of the
    mapping, so tensors and arrays restored from them use the file's pages directly (no copy,
    no second resident copy of the state; a page the program writes becomes its own). The
    checksum is still verified over every byte first. Files are only ever replaced whole
    (:func:`write_image` renames), so a mapped checkpoint never changes under the program.

    ``span``: ``(offset, length)`` of an image held inside ``path`` (a rank's part of a
    multi-process checkpoint set is one buffer of the set's image); read in place.
    """
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below, errors mapped
    except OSError as exc:
        raise CheckpointUnreadableError(
            f"cannot read checkpoint {os.fspath(path)!r}: {exc.strerror or exc}. Check the path "
            "and that this user may read it"
        ) from exc
    with fh:
        mapped = _map(fh)
        if span is not None:
            offset, length = span
            if mapped is None or offset < 0 or offset + length > len(mapped):
                raise _corrupt(
                    os.fspath(path),
                    f"it holds no image at bytes {offset}..{offset + length} (not a regular "
                    "file, or shorter)",
                )
            return _read_from(_MappedSource(mapped, offset, length), os.fspath(path))
        source: _Source = _MappedSource(mapped) if mapped is not None else _FileSource(fh)
        return _read_from(source, os.fspath(path))


def _map(fh: Any) -> mmap.mmap | None:
    """A private, writable mapping of a regular, non-empty file; None where that cannot be."""
    try:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
            return None
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    except (OSError, ValueError, AttributeError):
        return None


class _Source(Protocol):
    def read(self, n: int) -> bytes | memoryview: ...  # up to n bytes

    def exact(self, n: int, path: str, what: str, remainder: int) -> bytearray | memoryview:
        """Exactly ``n`` bytes. Read into memory: at ``remainder`` modulo ALIGN (the section's
        offset's, so a buffer is at its captured alignment); mapped: where the file has them."""
        ...


class _FileSource:
    def __init__(self, fh: Any) -> None:
        self.fh = fh

    def read(self, n: int) -> bytes:
        return bytes(self.fh.read(n))

    def exact(self, n: int, path: str, what: str, remainder: int) -> memoryview:
        return _read_exact(self.fh, n, path, what, remainder)


class _MappedSource:
    def __init__(self, mapped: mmap.mmap, offset: int = 0, length: int | None = None) -> None:
        view = memoryview(mapped)
        self.view = view if length is None else view[offset : offset + length]
        self.pos = 0

    def read(self, n: int) -> memoryview:
        chunk = self.view[self.pos : self.pos + n]
        self.pos += len(chunk)
        return chunk

    def exact(self, n: int, path: str, what: str, remainder: int) -> memoryview:
        if self.pos + n > len(self.view):
            raise _corrupt(path, f"it ends inside the {what} (truncated)")
        if n == 0:
            return self.read(0)
        # A ctypes array over the mapping, marked as file pages, so that release_pages knows
        # a view of it may give its pages back (its bytes stay in the file and the page cache).
        pages = (ctypes.c_ubyte * n).from_buffer(self.view, self.pos)
        pages._portal_file_pages = True  # type: ignore[attr-defined]
        self.pos += n
        return memoryview(pages).cast("B")


def _madvise() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        advise = libc.madvise
    except (OSError, AttributeError):
        return None
    advise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return advise


_ADVISE = _madvise() if sys.platform.startswith("linux") else None
_MADV_DONTNEED = 4  # Linux
_PAGE = mmap.PAGESIZE


def release_pages(view: memoryview) -> None:
    """Give back this process's pages of ``view`` when it is a buffer of a mapped checkpoint
    (:func:`read_image`), once its bytes are used elsewhere: checksummed, or copied to a GPU.

    The mapping is private and nothing wrote to it, so the pages stay the file's: a later read
    of the view faults them in again from the page cache. Without this, a restore of 16 GB of
    GPU state would hold 16 GB of resident host pages until the image is dropped. Any other
    view (bytes in memory) is left alone."""
    if _ADVISE is None or not getattr(view.obj, "_portal_file_pages", False) or not view.nbytes:
        return
    address = ctypes.addressof(ctypes.c_char.from_buffer(view))
    start = -(-address // _PAGE) * _PAGE
    stop = (address + view.nbytes) // _PAGE * _PAGE
    if stop > start:
        _ADVISE(start, stop - start, _MADV_DONTNEED)


def _corrupt(path: str, why: str) -> CheckpointCorruptError:
    return CheckpointCorruptError(
        f"checkpoint {path!r} is not an intact Portal checkpoint: {why}. It cannot be resumed; "
        "resume from another copy (storage keeps the uploaded one) or the previous checkpoint"
    )


def _read_exact(fh: object, n: int, path: str, what: str, remainder: int = 0) -> memoryview:
    view = aligned_bytearray(n, remainder)
    got = 0
    while got < n:
        k = fh.readinto(view[got:])  # type: ignore[attr-defined]
        if not k:
            raise _corrupt(path, f"it ends inside the {what} (truncated)")
        got += k
    return view


#: The image's first bytes: the start marker and the header's length.
PREFIX_BYTES = len(MAGIC) + _U32.size
#: The image's last bytes: the end marker and the CRC-32 of everything before it.
TRAILER_BYTES = len(END_MAGIC) + _U32.size


def header_length(prefix: bytes, path: str) -> int:
    """The header's length, from an image's first :data:`PREFIX_BYTES` bytes.

    This and :meth:`ImageLayout.parse` and :func:`check_trailer` are the image's one parser,
    without I/O: :func:`read_image` feeds them a file, the node's checkpoint stream the bytes
    of a file still being written. Raises :class:`CheckpointCorruptError` naming ``path``."""
    if len(prefix) < PREFIX_BYTES or prefix[: len(MAGIC)] != MAGIC:
        raise _corrupt(path, "it does not start with Portal's checkpoint marker")
    (length,) = _U32.unpack(prefix[len(MAGIC) : PREFIX_BYTES])
    if length > _MAX_HEADER:
        raise _corrupt(path, f"its header length ({length} bytes) is implausible")
    return int(length)


@attrs.frozen(kw_only=True)
class ImageLayout:
    """What an image's prefix and header say about the rest of it: the sections that follow
    and their lengths, hence its size, known before a byte of the state is read."""

    prefix: bytes
    raw_header: bytes
    header: Header

    @classmethod
    def parse(cls, prefix: bytes, raw_header: bytes, path: str) -> ImageLayout:
        """Decode the header; refuse a newer format by name, and a damaged header."""
        try:
            version = _decode_version(raw_header).format_version
        except msgspec.DecodeError as exc:
            raise _corrupt(path, f"its header cannot be decoded ({exc})") from exc
        if version > FORMAT_VERSION:
            raise CheckpointFormatTooNewError(
                f"checkpoint {path!r} has format version {version}, written by a newer "
                f"portal-capture; this one reads up to version {FORMAT_VERSION}. Upgrade "
                "portal-capture on this machine to resume it",
                details={"format_version": version, "supported": FORMAT_VERSION},
            )
        try:
            header = _decode_header(raw_header)
        except msgspec.DecodeError as exc:
            raise _corrupt(path, f"its header is invalid ({exc})") from exc
        pads = header.buffer_pads
        if pads and (
            len(pads) != len(header.buffer_lengths) or not all(0 <= p < ALIGN for p in pads)
        ):
            raise _corrupt(path, "its header's buffer padding does not fit its buffers")
        return cls(prefix=bytes(prefix), raw_header=bytes(raw_header), header=header)

    @property
    def sections(self) -> list[tuple[str, int]]:
        """What follows the header, in order: the state's pickle, then each buffer, with the
        zero bytes that place them (:data:`PADDING`) where the image has any."""
        header = self.header
        found: list[tuple[str, int]] = []
        head_pad = _head_pad(len(self.prefix) + len(self.raw_header), header)
        if head_pad:
            found.append((PADDING, head_pad))
        found.append(("state", header.pickle_length))
        pads = header.buffer_pads or [0] * len(header.buffer_lengths)
        for i, (pad, length) in enumerate(zip(pads, header.buffer_lengths, strict=True)):
            if pad:
                found.append((PADDING, pad))
            found.append((f"buffer {i}", length))
        return found

    def spans(self) -> dict[str, tuple[int, int]]:
        """Each section but the padding by name (``"state"``, ``"buffer 0"``, ...): its
        ``(offset, length)`` in the image."""
        found = {}
        at = len(self.prefix) + len(self.raw_header)
        for what, length in self.sections:
            if what != PADDING:
                found[what] = (at, length)
            at += length
        return found

    @property
    def head_crc(self) -> int:
        """The running CRC-32 after the prefix and the header."""
        return zlib.crc32(self.raw_header, zlib.crc32(self.prefix))

    @property
    def total(self) -> int:
        """The whole image's size in bytes."""
        return (
            len(self.prefix)
            + len(self.raw_header)
            + sum(length for _, length in self.sections)
            + TRAILER_BYTES
        )


def check_trailer(trailer: bytes, crc: int, path: str) -> None:
    """Check the end marker, and that ``crc`` (of every byte before it) is the one recorded."""
    if len(trailer) != TRAILER_BYTES or trailer[: len(END_MAGIC)] != END_MAGIC:
        raise _corrupt(path, "its end marker is missing (truncated or appended to)")
    if _U32.unpack(trailer[len(END_MAGIC) :])[0] != crc:
        raise _corrupt(path, "its checksum does not match its contents (altered or damaged)")


def _read_from(fh: _Source, path: str) -> CheckpointImage:
    prefix = bytes(fh.read(PREFIX_BYTES))
    raw_header = bytes(fh.exact(header_length(prefix, path), path, "header", 0))
    layout = ImageLayout.parse(prefix, raw_header, path)
    crc = layout.head_crc
    at = len(layout.prefix) + len(layout.raw_header)
    views, alignments = [], []
    for what, n in layout.sections:
        views.append((what, memoryview(fh.exact(n, path, what, at % ALIGN))))
        if what.startswith("buffer"):
            alignments.append(at % ALIGN)
        at += n
    if sum(layout.header.buffer_lengths) >= PARALLEL_CRC_BYTES:  # GPU-sized state: every core
        parallel = ParallelCrc(crc, after=release_pages)
        for _, view in views:
            parallel.feed(view)
        crc = parallel.result()
    else:
        for _, view in views:
            crc = zlib.crc32(view, crc)
    check_trailer(bytes(fh.read(TRAILER_BYTES)), crc, path)
    if len(fh.read(1)):
        raise _corrupt(path, "it has bytes after its end marker")
    payload, *buffers = [view for what, view in views if what != PADDING]
    return CheckpointImage(
        header=layout.header,
        pickle=bytes(payload),
        buffers=buffers,
        alignments=alignments if layout.header.buffer_pads else (),
    )


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
