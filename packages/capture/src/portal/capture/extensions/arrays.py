"""numpy arrays in a checkpoint: a view keeps sharing its base.

numpy pickles each array on its own (protocol 5 sends its data out of band, with no copy): two
views of one array come back as two independent arrays, and a program that writes through one
would no longer see the change through the other. So a *view* whose chain of ``.base`` ends at
an ndarray owning its memory reduces to that root array (pickled once, out of band, memoized)
plus its geometry (byte offset, shape, strides, dtype, writeable flag). Arrays that view no other
ndarray (owning their data, or over ``bytes``, ``mmap``, a torch tensor's ``.numpy()``) pickle as
numpy pickles them.
"""

from __future__ import annotations

import sys
from typing import Any

from portal.core.specs import SerializerSpec

__all__ = ["reduce_ndarray", "serializer_specs"]


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
    """A view as (root, geometry); anything else as numpy pickles it."""
    if array.dtype.hasobject:
        return NotImplemented
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


def serializer_specs() -> list[SerializerSpec]:
    return [
        SerializerSpec(
            name="capture_numpy",
            reducers={"numpy.ndarray": reduce_ndarray},
            description="numpy views pickled as views onto their (shared) base array",
        )
    ]
