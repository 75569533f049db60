"""numpy arrays in a checkpoint: a view keeps sharing its base.

numpy pickles each array on its own (protocol 5 sends its data out of band, with no copy): two
views of one array come back as two independent arrays, and a program that writes through one
would no longer see the change through the other. So a *view* whose chain of ``.base`` ends at
an ndarray owning its memory reduces to that root array (pickled once, out of band, memoized)
plus its geometry (byte offset, shape, strides, dtype, writeable flag). Arrays that view no other
ndarray (owning their data, or over ``bytes``, a torch tensor's ``.numpy()``) pickle as numpy
pickles them.

A ``numpy.memmap`` mapping a file (``np.memmap("train.bin", mode="r")``: most pre-training
loaders keep one per data shard, llama2.c's in its dataset's generator) travels as *the mapping*:
file, mode, the mapped span and the array's place in it, and no byte of its data. numpy would
pickle its contents, the whole shard, and bring it back as an array in memory; a ``r+`` map would
then no longer write to its file. The resumed array is mapped again, on the same file (mapped
into the resumed job's directory when it was under the old one), at the same offset and the same
place within a page (so its alignment is the captured one too): the pickle loads before the
working directory's files are restored, so the array is first made over an anonymous mapping of
the span's size, and the file is mapped over those very pages (``MAP_FIXED``) once the restore is
done. A writable map (``r+``, ``w+``) is flushed at the pause, so the file holds what the
program wrote. A copy-on-write map (``c``) holds changes no file has: it travels by value, as
numpy pickles it. A file shorter at the resume than the span is refused, named.

The rebuild functions' names are part of the checkpoint format: rename none of them.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from typing import Any

from portal.capture.alignment import address_of
from portal.capture.extensions.workdir import relocate
from portal.capture.restoring import after_restore
from portal.core.specs import SerializerSpec

__all__ = ["rebuild_memmap", "reduce_memmap", "reduce_ndarray", "serializer_specs"]


def _root(array: Any) -> Any | None:
    """The outermost ndarray of ``array``'s ``.base`` chain, or None (not a view of an ndarray).
    That root may itself view a foreign buffer (a restored array views the checkpoint's bytes):
    it pickles whole, as numpy pickles it."""
    np = sys.modules["numpy"]
    base = array.base
    if not isinstance(base, np.ndarray):
        return None
    while isinstance(base.base, np.ndarray):
        base = base.base
    if type(base) is not np.ndarray:
        return None  # a subclass (memmap...) with its own pickling
    return base


def reduce_ndarray(array: Any) -> Any:
    """A view as (root, geometry); a file's map as the mapping; anything else as numpy
    pickles it."""
    if array.dtype.hasobject:
        return NotImplemented
    if _is_file_map(array):
        return reduce_memmap(array)
    root = _root(array)
    if root is None:
        return NotImplemented
    offset = array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return (
        _rebuild_view,
        (root, offset, array.shape, array.strides, array.dtype, bool(array.flags.writeable)),
    )


def _rebuild_view(
    root: Any,
    offset: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    dtype: Any,
    writeable: bool,
) -> Any:
    np = sys.modules["numpy"]
    view = np.ndarray(shape, dtype, buffer=root, offset=offset, strides=strides)
    if not writeable:
        view.flags.writeable = False
    return view


# -- numpy.memmap ------------------------------------------------------------------------------

_MAP_SHARED, _MAP_FIXED = 0x01, 0x10  # <sys/mman.h>, on Linux and macOS alike
_PROT = {"r": mmap.PROT_READ, "r+": mmap.PROT_READ | mmap.PROT_WRITE}


def _is_file_map(array: Any) -> bool:
    np = sys.modules["numpy"]
    return (
        isinstance(array, np.memmap)
        and isinstance(getattr(array, "_mmap", None), mmap.mmap)
        and isinstance(getattr(array, "filename", None), (str, os.PathLike))
        and getattr(array, "mode", None) in ("r", "r+", "w+")
        and array.size > 0
    )


def reduce_memmap(array: Any) -> Any:
    """``array`` (a memmap over a file) as its mapping: (file, as numpy keeps it: a ``str`` or
    the resolved ``Path`` it was given, mode, where the span starts in the file, its length,
    the array's offset in it, shape, strides, dtype, numpy's offset)."""
    span = array._mmap
    base = address_of(span)
    if base is None:
        return NotImplemented
    if array.mode != "r":
        span.flush()  # what the program wrote is in the file, which travels
    granularity = mmap.ALLOCATIONGRANULARITY
    start = array.offset - array.offset % granularity  # numpy maps from there
    return (
        rebuild_memmap,
        (
            array.filename,
            "r" if array.mode == "r" else "r+",  # a w+ map's file exists now: never truncate
            start,
            len(span),
            array.__array_interface__["data"][0] - base,
            array.shape,
            array.strides,
            array.dtype,
            array.offset,
        ),
    )


def rebuild_memmap(
    filename: Any,
    mode: str,
    start: int,
    length: int,
    at: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    dtype: Any,
    offset: int,
) -> Any:
    """The memmap over an anonymous span now; the file mapped over it once restored."""
    np = sys.modules["numpy"]
    span = mmap.mmap(-1, length)
    array = np.ndarray.__new__(np.memmap, shape, dtype, buffer=span, offset=at, strides=strides)
    array._mmap, array.filename, array.offset, array.mode = span, filename, offset, mode
    if mode == "r":
        array.flags.writeable = False

    def map_file() -> None:
        path = relocate(os.fspath(filename))
        with open(path, "rb" if mode == "r" else "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            if size < start + length:
                raise OSError(
                    f"cannot map {path} again for a numpy.memmap: it has {size} bytes, and the "
                    f"array mapped bytes {start} to {start + length} (the file changed since the "
                    "pause: put the file the job was paused with back in place)"
                )
            _map_over(span, length, _PROT[mode], f.fileno(), start)
        array.filename = path if isinstance(filename, str) else type(filename)(path)

    after_restore(map_file)
    return array


def _map_over(span: mmap.mmap, length: int, prot: int, fd: int, start: int) -> None:
    """Map ``length`` bytes of ``fd`` from ``start`` over the pages of ``span``."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int64,
    ]
    address = address_of(span)
    got = libc.mmap(address, length, prot, _MAP_SHARED | _MAP_FIXED, fd, start)
    if got != address:
        error = ctypes.get_errno()
        raise OSError(error, f"cannot map a numpy.memmap's file again: {os.strerror(error)}")


def serializer_specs() -> list[SerializerSpec]:
    return [
        SerializerSpec(
            name="capture_numpy",
            reducers={"numpy.ndarray": reduce_ndarray},
            description="numpy views pickled as views onto their (shared) base array; a "
            "memmap as its file's mapping",
        )
    ]
