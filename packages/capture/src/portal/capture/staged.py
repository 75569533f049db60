"""Out-of-band buffers whose bytes are not in host memory: a GPU tensor's storage, say.

Copying a GPU's state to host memory whole before writing it would double the host memory a
checkpoint needs (16 GB of model and Adam state would need 16 GB of pinned host memory). Such a
buffer is instead *staged*: the image writer asks it for its bytes a chunk at a time and writes
each chunk before the next is fetched, so the host holds a chunk or two, never the state.

A reducer hands one to the pickle as :func:`pickle_buffer` (a one-byte stand-in the pickler's
buffer callback recognises); the buffer list of the image then holds the staged buffer itself,
in its place. Everything that reads an image from a file sees plain bytes: staging is a matter
of writing only.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

__all__ = ["Buffer", "StagedBuffer", "pickle_buffer", "staged_in"]


@runtime_checkable
class StagedBuffer(Protocol):
    """Bytes fetched on demand, a chunk at a time."""

    @property
    def nbytes(self) -> int: ...

    def chunks(self, consumed: Callable[[], object]) -> Iterator[memoryview]:
        """The bytes in order. A chunk is valid until the next one is asked for, and before the
        buffer reuses a chunk's memory it calls ``consumed``, which returns once every chunk
        handed out so far is no longer read (a checksum thread has finished with it)."""
        ...

    def tobytes(self) -> bytes | bytearray:
        """All the bytes, copied into host memory (a periodic checkpoint's held copy)."""
        ...


#: An image's out-of-band buffer: bytes in memory, or staged.
Buffer = memoryview | StagedBuffer


class _Marker(bytearray):
    """The one-byte stand-in a pickle buffer wraps for a staged buffer."""

    staged: StagedBuffer


def pickle_buffer(staged: StagedBuffer) -> pickle.PickleBuffer:
    """A :class:`pickle.PickleBuffer` that stands for ``staged`` in a reducer's arguments."""
    marker = _Marker(1)
    marker.staged = staged
    return pickle.PickleBuffer(marker)


def staged_in(raw: memoryview) -> StagedBuffer | None:
    """The staged buffer a pickle buffer's ``raw()`` view stands for, or None for plain bytes."""
    owner = raw.obj
    return owner.staged if isinstance(owner, _Marker) else None
