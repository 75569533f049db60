"""A ``DistributedDataParallel`` module carried by a checkpoint: re-created at resume, never
captured, with the gradient-bucket layout it had.

DDP's own pickling leaves its C++ parts out (the process group, the reducer, its logger) and
rebuilds them on the new default process group without any collective (its constructor would
broadcast rank 0's parameters and buffers, and overwrite a rank that paused on the other side of
``optimizer.step()``). But a new reducer starts from the *initial* bucket layout, while a DDP
that has run a backward works with the layout it rebuilt from the order its gradients became
ready. Gloo and NCCL sum a bucket in chunks whose bounds follow the bucket's size, so with three
or more ranks another layout sums in another order: the resumed run would differ in its last
bits. So the layout is recorded (each bucket's parameter indices) and the new reducer is built
with it.

A DDP on a group the program made with ``new_group`` takes the same path on that group (made
again at resume from the group log, :mod:`.groups`): DDP's own rule that only the default
group pickles is a rule of its constructor's broadcast, which this path never runs. torch is
imported only from a DDP the program already holds.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any, ClassVar

from portal.core.errors import CapturePortalError

__all__ = ["DistributedUnsupportedError", "bucket_layout", "rebuild_ddp", "reduce_ddp"]


class DistributedUnsupportedError(CapturePortalError, TypeError):
    """A torch.distributed object Portal cannot re-create at resume (a ``TypeError`` too: what
    a reducer raises for a value a checkpoint cannot carry, so it is reported by name)."""

    code: ClassVar[str] = "CAPTURE_DISTRIBUTED_UNSUPPORTED"


def _torch() -> Any:
    return sys.modules["torch"]


def bucket_layout(ddp: Any) -> list[list[int]]:
    """The reducer's buckets now, in its order, each as the indices of its parameters in the
    order DDP hands parameters to its reducer."""
    parameters, _ = ddp._build_params_for_reducer()
    index = {id(p): i for i, p in enumerate(parameters)}
    return [
        [index[id(p)] for p in bucket.parameters()]
        for bucket in ddp.reducer._get_zeros_like_grad_buckets()
    ]


@contextlib.contextmanager
def _default_group_is(group: Any) -> Iterator[None]:
    """While DDP pickles or unpickles itself, its idea of the default group is ``group`` (None:
    the real one). DDP's own path (no collective, its reducer rebuilt) then serves a DDP on a
    group made by ``new_group`` as it serves one on the default group."""
    if group is None:
        yield
        return
    module: Any = sys.modules["torch.nn.parallel.distributed"]
    original = module._get_default_group
    module._get_default_group = lambda: group
    try:
        yield
    finally:
        module._get_default_group = original


def reduce_ddp(ddp: Any) -> tuple[Any, tuple[Any, ...]]:
    """The pickler's reducer for a DDP module: its own state, its bucket layout, and its
    process group when that is not the default one (it travels as "group #k of the log")."""
    distributed = _torch().distributed
    default = distributed.distributed_c10d._get_default_group()
    group = None if ddp.process_group is default else ddp.process_group
    with _default_group_is(group):
        state = ddp.__getstate__()
    if group is None:
        return rebuild_ddp, (state, bucket_layout(ddp))
    return rebuild_ddp, (state, bucket_layout(ddp), group)


@contextlib.contextmanager
def _assigned(layout: list[list[int]], cap_bytes: int) -> Iterator[None]:
    """While DDP builds its reducer, its bucket assignment is ``layout`` (DDP reverses what
    the assignment answers before handing it to the reducer, so it is answered reversed)."""
    distributed = _torch().distributed
    original = distributed._compute_bucket_assignment_by_size

    def recorded(*_: Any, **__: Any) -> tuple[list[list[int]], list[int]]:
        return list(reversed(layout)), [cap_bytes] * len(layout)

    distributed._compute_bucket_assignment_by_size = recorded
    try:
        yield
    finally:
        distributed._compute_bucket_assignment_by_size = original


def rebuild_ddp(state: dict[str, Any], layout: list[list[int]] | None, group: Any = None) -> Any:
    """A DDP on ``group`` (None: this process's default group) from its pickled state, its
    reducer built with ``layout`` (None: DDP's initial one)."""
    torch = _torch()
    ddp = torch.nn.parallel.DistributedDataParallel.__new__(
        torch.nn.parallel.DistributedDataParallel
    )
    with _default_group_is(group):
        if not layout:
            ddp.__setstate__(state)
            return ddp
        with _assigned(layout, int(state.get("bucket_bytes_cap", 25 * 1024 * 1024))):
            ddp.__setstate__(state)
    return ddp
