"""torch tensors in a checkpoint: storages once, out of band; tensors as views onto them.

``torch``'s own pickling (``Tensor.__reduce_ex__``) copies every storage into the pickle stream
and needs ``torch.load``'s persistent-id machinery to share one storage between tensors. A
checkpoint already has a better place for bulk bytes: out-of-band buffers, written straight from
the memory they live in. So:

- an ``UntypedStorage`` reduces to its bytes as a :class:`pickle.PickleBuffer` over the storage's
  own memory (no copy on a CPU tensor) plus its device. A GPU storage's bytes are *staged*
  (:class:`DeviceBuffer`): the writer fetches them through two pinned chunks while it writes the
  file, so the host never holds the GPU's state whole. ``tensor.untyped_storage()`` returns the
  same Python object for one storage every time, so the pickle memoizes it: tensors sharing a
  storage (views, ``reshape``, parameters and their ``.data``) share it again after a resume;
- a tensor reduces to that storage and its view geometry (offset, size, stride, dtype), its
  ``requires_grad``, ``.grad`` and Python attributes; an ``nn.Parameter`` stays a Parameter.
  A tensor inside an autograd graph travels as its value (``detach()``) once ``backward()`` has
  used that graph (a loss kept from the last step is the common case). Before that, between the
  forward pass and ``backward()``, the graph is needed and cannot travel (it is the process's own
  C++ objects): the reducer raises :class:`~portal.core.specs.WaitForSafePoint` and the pause is
  taken a line or two later, after ``backward()``. A graph that is never used (a hidden state
  carried across steps without ``detach()``) holds the pause until its deadline, named;
- on resume the bytes become the storage with no copy (the buffer read from the checkpoint
  *is* the tensor's memory). A CUDA storage goes back onto a GPU when this machine has one
  (``cuda:N`` mapped onto the devices that exist; :func:`upload` copies it through two pinned
  chunks in turn), else onto the CPU, with a note on stderr and in the job's events;
- the default CPU and CUDA ``torch.Generator`` objects pickle by reference (a program holding
  ``torch.default_generator`` keeps using the process's one); other generators by value.

Sparse, quantized, meta and nested tensors are refused with a message naming them: the engine
then reports them as a value the checkpoint cannot carry.
"""

from __future__ import annotations

import ctypes
import pickle
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from portal.capture import staged
from portal.capture.alignment import aligned_copy
from portal.capture.image import release_pages
from portal.capture.notes import note_on_restore
from portal.core.specs import SerializerSpec, WaitForSafePoint

__all__ = [
    "DeviceBuffer",
    "reduce_generator",
    "reduce_storage",
    "reduce_tensor",
    "serializer_specs",
    "upload",
]

#: A GPU storage goes to and from host memory through two pinned buffers of this size, in turn:
#: while one chunk is written to the file (or copied out of it), the GPU copies the next.
STAGING_CHUNK = 64 << 20
#: Storages at most this large are uploaded by one plain copy (the pipeline's set-up would cost
#: more than it saves).
DIRECT_UPLOAD = 4 << 20


def _torch() -> Any:
    return sys.modules["torch"]  # a reducer runs only for a type of a loaded torch


def _address_array(tensor: Any, nbytes: int, owner: Any) -> Any:
    """The first ``nbytes`` of a host tensor's memory as a ctypes array over it, holding
    ``owner`` (the memory's keeper). A pickle buffer wraps the array itself, never a memoryview
    of it: a memoryview that has exported its buffer cannot be cleared by the garbage collector,
    and CPython's collector, clearing one in a cycle anyway (an image held by an exception's
    traceback, say), frees the memory under its other views and crashes the process."""
    array = (ctypes.c_ubyte * nbytes).from_address(tensor.data_ptr())
    array._portal_owner = owner  # type: ignore[attr-defined]
    return array


def _address_view(tensor: Any, nbytes: int, owner: Any) -> memoryview:
    """A flat view of the first ``nbytes`` of a host tensor's memory (see :func:`_address_array`)."""
    return memoryview(_address_array(tensor, nbytes, owner)).cast("B")


# -- storages ---------------------------------------------------------------------------------


def _flat(storage: Any, nbytes: int) -> Any:
    torch = _torch()
    flat = torch.empty(0, dtype=torch.uint8, device=storage.device)
    flat.set_(storage, 0, (nbytes,))
    return flat


class DeviceBuffer:
    """A GPU storage's bytes for the image writer (a :class:`~portal.capture.staged.StagedBuffer`):
    copied to host memory a chunk at a time while the file is written, never whole.

    Two pinned buffers of :data:`STAGING_CHUNK` take turns: the GPU copies chunk k+1 into one
    (asynchronously, on the program's current stream, so after every kernel it queued) while
    chunk k is written from the other. The host holds two chunks (128 MiB), whatever the state's
    size. Any storage not on the CPU works the same way without CUDA's asynchrony."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage
        self.nbytes = int(storage.nbytes())

    def chunks(self, consumed: Callable[[], object]) -> Iterator[memoryview]:
        torch = _torch()
        total = self.nbytes
        if total == 0:
            return
        src = _flat(self.storage, total)
        device = self.storage.device
        cuda = device.type == "cuda" and bool(torch.cuda.is_available())
        size = min(STAGING_CHUNK, total)
        count = -(-total // size)
        stages = [
            torch.empty(size, dtype=torch.uint8, pin_memory=cuda) for _ in range(min(2, count))
        ]
        events: list[Any] = [None] * len(stages)

        def fetch(k: int) -> None:
            slot, start = k % len(stages), k * size
            stop = min(total, start + size)
            stages[slot][: stop - start].copy_(src[start:stop], non_blocking=cuda)
            if cuda:
                events[slot] = torch.cuda.Event()
                events[slot].record(torch.cuda.current_stream(device))

        try:
            for k in range(min(2, count)):
                fetch(k)
            for k in range(count):
                slot = k % len(stages)
                if cuda:
                    events[slot].synchronize()
                length = min(total, (k + 1) * size) - k * size
                yield _address_view(stages[slot], length, stages[slot])
                if k + 2 < count:
                    consumed()  # nobody reads the chunk just written any more: refill its slot
                    fetch(k + 2)
        finally:
            consumed()  # the slots go back to the allocator only once nobody reads them
            if cuda:
                torch.cuda.current_stream(device).synchronize()

    def tobytes(self) -> bytearray:
        out = bytearray(self.nbytes)  # one host copy (not a second one as bytes)
        view = memoryview(out)
        at = 0
        for chunk in self.chunks(lambda: None):
            view[at : at + len(chunk)] = chunk
            at += len(chunk)
        return out


def host_bytes(storage: Any) -> Any:
    """A CPU storage's bytes: its own memory, no copy (an object with the buffer protocol)."""
    nbytes = int(storage.nbytes())
    if nbytes == 0:
        return b""
    return _address_array(_flat(storage, nbytes), nbytes, storage)


def reduce_storage(storage: Any) -> Any:
    """An ``UntypedStorage``: its bytes out of band, and the device it lived on. A GPU
    storage's bytes are staged: fetched while the image is written, never held whole."""
    if storage.device.type != "cpu" and int(storage.nbytes()) > 0:
        buffer = staged.pickle_buffer(DeviceBuffer(storage))
    else:
        buffer = pickle.PickleBuffer(host_bytes(storage))
    return (_rebuild_storage, (buffer, str(storage.device)))


def _rebuild_storage(data: Any, device: str) -> Any:
    torch = _torch()
    view = memoryview(data).cast("B")
    target = resume_device(device)
    if view.nbytes == 0:
        return torch.empty(0, dtype=torch.uint8, device=target).untyped_storage()
    if target != "cpu" and not view.readonly and view.nbytes > DIRECT_UPLOAD:
        return upload(view, target).untyped_storage()
    if view.readonly:  # an in-memory image of a live process: never alias its memory
        flat = torch.frombuffer(aligned_copy(view), dtype=torch.uint8)  # at its remainder
    else:  # the buffer read from the checkpoint becomes the tensor's memory
        flat = torch.frombuffer(view, dtype=torch.uint8)
    if target != "cpu":
        flat = flat.to(target)
    return flat.untyped_storage()


def upload(view: memoryview, target: str) -> Any:
    """``view``'s bytes in a new uint8 tensor on the GPU ``target``, copied through two pinned
    buffers in turn: the CPU fills one from the checkpoint's pages while the GPU copies the other
    (a copy straight from pageable memory goes through the driver's own staging, one chunk at a
    time, with no overlap)."""
    torch = _torch()
    total = view.nbytes
    out = torch.empty(total, dtype=torch.uint8, device=target)
    size = min(STAGING_CHUNK, total)
    stages = [torch.empty(size, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
    events: list[Any] = [None, None]
    stream = torch.cuda.current_stream(target)
    for k, start in enumerate(range(0, total, size)):
        slot, stop = k % 2, min(total, start + size)
        if events[slot] is not None:
            events[slot].synchronize()  # the GPU has copied what this slot held before
        stages[slot][: stop - start].copy_(torch.frombuffer(view[start:stop], dtype=torch.uint8))
        release_pages(view[start:stop])  # on the GPU soon: the file's pages are not needed here
        out[start:stop].copy_(stages[slot][: stop - start], non_blocking=True)
        events[slot] = torch.cuda.Event()
        events[slot].record(stream)
    stream.synchronize()
    return out


_CPU_NOTE_SHOWN = False
#: The note (stderr and the job's events) when GPU tensors arrive on a machine without a GPU.
CPU_NOTE = (
    "this machine has no CUDA GPU; the checkpoint's GPU tensors were restored onto the CPU "
    "(move them with .to('cuda') on a GPU machine)"
)


def resume_device(device: str) -> str:
    """Where a storage saved on ``device`` goes in this process: ``cuda:N`` onto an existing GPU
    (``N`` modulo the device count), or the CPU when this machine has none (noted once)."""
    global _CPU_NOTE_SHOWN
    if not device.startswith("cuda"):
        return "cpu"
    torch = _torch()
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        index = int(device.partition(":")[2] or 0)
        return f"cuda:{index % torch.cuda.device_count()}"
    if not _CPU_NOTE_SHOWN:
        _CPU_NOTE_SHOWN = True
        note_on_restore(CPU_NOTE)
    return "cpu"


# -- tensors ----------------------------------------------------------------------------------

#: Graph nodes looked at, at most, per tensor: a forward pass of a large model has thousands. A
#: graph larger still (a loss summed as a tensor over a whole epoch) counts as used.
GRAPH_WALK_LIMIT = 100_000
#: The same, for the check made at every line while a pause waits: beyond it, the walk says
#: "not known" and the engine's back-off decides when to try again.
READY_WALK_LIMIT = 1_000
_SAVED_NAMES: dict[type, tuple[str, ...]] = {}  # node type -> its ``_saved_*`` attributes


def _graph_used(tensor: Any) -> Callable[[], bool]:
    """Whether ``tensor``'s graph has been used (or the tensor dropped) since: asked at every
    line while a pause waits, so it holds the tensor weakly (never keeping a graph alive)."""
    ref = weakref.ref(tensor)

    def ready() -> bool:
        alive = ref()
        if alive is None or alive.grad_fn is None:
            return True
        pending, whole = _walk_graph(alive.grad_fn, READY_WALK_LIMIT)
        return pending is None and whole

    return ready


def unused_graph_node(root: Any) -> str | None:
    """The name of a node of the autograd graph under ``root`` that still holds saved tensors
    (``backward()`` has not run through it, so the graph is still needed), or None when every
    node's saved tensors were freed by a ``backward()`` or it never saved any.

    torch has no public "was this graph used" flag; a node's ``_saved_*`` attributes are its
    documented view of what it saved, and reading one after ``backward()`` freed it raises. The
    walk does not descend below a freed node (one ``backward()`` frees everything under it)."""
    return _walk_graph(root, GRAPH_WALK_LIMIT)[0]


def _walk_graph(root: Any, limit: int) -> tuple[str | None, bool]:
    """(the first node found still holding saved tensors, whether the walk saw everything)."""
    torch = _torch()
    stack: list[Any] = [root]
    seen: set[int] = set()
    while stack:
        if len(seen) >= limit:
            return None, False
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        kind = type(node)
        names = _SAVED_NAMES.get(kind)
        if names is None:
            names = _SAVED_NAMES[kind] = tuple(n for n in dir(kind) if n.startswith("_saved_"))
        freed = False
        for name in names:
            try:
                saved = getattr(node, name)
            except RuntimeError:  # freed by backward()
                freed = True
                break
            if isinstance(saved, torch.Tensor) or (
                isinstance(saved, (tuple, list))
                and any(isinstance(item, torch.Tensor) for item in saved)
            ):
                return kind.__name__, True
        if not freed:
            stack.extend(child for child, _index in getattr(node, "next_functions", ()))
    return None, True


def _reduce_sparse_coo(tensor: Any) -> Any:
    """A sparse COO tensor (an ``nn.Embedding(sparse=True)``'s gradient, which ``SparseAdam``
    steps on): its indices and values, dense tensors that travel as any do, and its size."""
    return (
        _rebuild_sparse_coo,
        (
            tensor._indices(),
            tensor._values().detach(),
            tuple(tensor.shape),
            bool(tensor.is_coalesced()),
            bool(tensor.requires_grad and tensor.is_leaf),
            tensor.grad if tensor.is_leaf else None,
        ),
    )


def _rebuild_sparse_coo(
    indices: Any,
    values: Any,
    shape: tuple[int, ...],
    coalesced: bool,
    requires_grad: bool,
    grad: Any,
) -> Any:
    torch = _torch()
    tensor = torch.sparse_coo_tensor(
        indices,
        values,
        shape,
        is_coalesced=coalesced,
        check_invariants=True,  # read from a file
    )
    if requires_grad:
        tensor.requires_grad_(True)
        tensor.grad = grad
    return tensor


def reduce_tensor(tensor: Any) -> Any:
    """A strided tensor as a view onto its (memoized) storage, with its autograd attributes."""
    torch = _torch()
    if tensor.layout == torch.sparse_coo and not tensor.is_quantized:
        return _reduce_sparse_coo(tensor)
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.is_nested:
        raise TypeError(
            f"cannot carry a {tensor.layout} / quantized / nested tensor "
            f"({tuple(tensor.shape)}, {tensor.dtype}); convert it to a dense tensor "
            "(.to_dense() / .dequantize()) before the pause"
        )
    if tensor.device.type == "meta":
        raise TypeError("cannot carry a tensor on the 'meta' device: it has no data")
    if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
        t = type(tensor)
        raise TypeError(
            f"cannot carry tensor subclass '{t.__module__}.{t.__qualname__}'; store its data "
            "as a plain tensor"
        )
    leaf = tensor.is_leaf
    if not leaf and tensor.grad_fn is not None:
        pending = unused_graph_node(tensor.grad_fn)
        if pending is not None:
            raise WaitForSafePoint(
                f"in an autograd graph that backward() has not used yet ({pending} still holds "
                "its saved tensors); the pause waits for a line after backward(), or call "
                ".detach() to keep only the value",
                ready=_graph_used(tensor),
            )
    value = tensor if leaf else tensor.detach()
    state: dict[str, Any] = {
        "requires_grad": bool(tensor.requires_grad and leaf),
        "grad": tensor.grad if leaf else None,
    }
    attrs = getattr(tensor, "__dict__", None)
    if attrs:
        state["attrs"] = dict(attrs)
    return (
        _rebuild_tensor,
        (
            value.untyped_storage(),
            int(value.storage_offset()),
            tuple(value.shape),
            tuple(value.stride()),
            value.dtype,
            isinstance(tensor, torch.nn.Parameter),
        ),
        state,
        None,
        None,
        _set_tensor_state,
    )


def _rebuild_tensor(
    storage: Any,
    offset: int,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    dtype: Any,
    param: bool,
) -> Any:
    torch = _torch()
    tensor = torch.empty(0, dtype=dtype, device=storage.device)
    tensor.set_(storage, offset, size, stride)
    if param:
        tensor = torch.nn.Parameter(tensor, requires_grad=False)
    return tensor


def _set_tensor_state(tensor: Any, state: dict[str, Any]) -> None:
    tensor.requires_grad_(state["requires_grad"])
    if state.get("grad") is not None:
        tensor.grad = state["grad"]
    for key, value in state.get("attrs", {}).items():
        setattr(tensor, key, value)


# -- generators -------------------------------------------------------------------------------


def reduce_generator(gen: Any) -> Any:
    """The process's default CPU/CUDA generators by reference; any other by value (torch's)."""
    torch = _torch()
    if gen is torch.default_generator:
        return (_default_generator, ("cpu",))
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None and gen.device.type == "cuda":
        defaults = getattr(cuda, "default_generators", ())
        for i, default in enumerate(defaults):
            if gen is default:
                return (_default_generator, (f"cuda:{i}",))
        # Another CUDA generator: by value onto the device it maps to here.
        return (_rebuild_generator, (resume_device(str(gen.device)), gen.get_state()))
    return NotImplemented


def _default_generator(device: str) -> Any:
    torch = _torch()
    if device == "cpu":
        return torch.default_generator
    target = resume_device(device)
    if target == "cpu":
        return torch.default_generator
    return torch.cuda.default_generators[int(target.partition(":")[2])]


def _rebuild_generator(device: str, state: Any) -> Any:
    torch = _torch()
    gen = torch.Generator(device=device)
    if device == "cpu":
        return gen  # a CUDA generator's state does not fit the CPU's; it starts fresh
    gen.set_state(state)
    return gen


def serializer_specs() -> list[SerializerSpec]:
    return [
        SerializerSpec(
            name="capture_torch",
            reducers={
                "torch.Tensor": reduce_tensor,
                "torch.UntypedStorage": reduce_storage,
                "torch._C.Generator": reduce_generator,
            },
            description="torch tensors (storages out of band, views shared) and generators",
        )
    ]
