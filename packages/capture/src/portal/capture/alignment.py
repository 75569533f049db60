"""Buffers restored at their captured address modulo 64: "bit for bit" includes alignment.

numpy's and torch's reductions take another path through SIMD code when an array's data starts
at another address modulo the vector width: the same bytes at another alignment sum differently
in the last digits (``state.sum()`` 499797.04661438306 against 499797.0466143829), and every later
result of a resumed run drifts from the uninterrupted one.

So a checkpoint records where each out-of-band buffer lay (its address modulo :data:`ALIGN`, a
cache line and the widest vector register) and the image file places each buffer at an offset
with that remainder (zero padding before it; :mod:`portal.capture.image`). A mapped file starts on
a page, so a buffer viewed in place is back at its captured remainder, and so is every array and
tensor restored over it. Where the bytes are read rather than mapped (a pipe), they are read into
memory allocated at the same remainder (:func:`aligned_bytearray`).
"""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["ALIGN", "address_of", "aligned_bytearray", "aligned_copy", "remainder_of"]

#: The alignment kept: a cache line, and a multiple of every SIMD register width (AVX-512: 64).
ALIGN = 64


class _PyBuffer(ctypes.Structure):
    """CPython's ``Py_buffer`` (the same layout from 3.3 on; part of the stable ABI in 3.11+)."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.py_object),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
        ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
        ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)),
        ("internal", ctypes.c_void_p),
    ]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None
_PyBUF_SIMPLE = 0


def address_of(buffer: Any) -> int | None:
    """The address of the first byte of ``buffer`` (any object with the buffer protocol,
    read-only ones included), or None where it exposes no contiguous memory."""
    view = _PyBuffer()
    try:
        if _get_buffer(buffer, ctypes.byref(view), _PyBUF_SIMPLE) != 0:
            return None
    except (TypeError, BufferError, ValueError):  # ctypes raises the C call's error
        return None
    try:
        return int(view.buf or 0)
    finally:
        _release_buffer(ctypes.byref(view))


def remainder_of(buffer: Any) -> int:
    """``buffer``'s address modulo :data:`ALIGN` (0 where it has none in host memory: a
    staged GPU buffer, say)."""
    address = address_of(buffer)
    return 0 if address is None else address % ALIGN


def aligned_bytearray(n: int, remainder: int) -> memoryview:
    """``n`` writable zero bytes whose first lies at ``remainder`` modulo :data:`ALIGN`."""
    block = bytearray(n + ALIGN)
    start = (remainder - remainder_of(block)) % ALIGN
    return memoryview(block)[start : start + n]


def aligned_copy(buffer: Any) -> memoryview:
    """A writable copy of ``buffer``'s bytes at its own remainder modulo :data:`ALIGN`."""
    source = memoryview(buffer).cast("B")
    copy = aligned_bytearray(source.nbytes, remainder_of(source))
    copy[:] = source
    return copy
