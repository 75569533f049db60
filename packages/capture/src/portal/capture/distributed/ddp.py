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

The process group must be the default one (DDP's own rule for pickling); others are refused by
name until groups made by ``new_group`` are replayed at resume. torch is imported only from a
DDP the program already holds.
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


def reduce_ddp(ddp: Any) -> tuple[Any, tuple[Any, ...]]:
    """The pickler's reducer for a DDP module: its own state and its bucket layout."""
    distributed = _torch().distributed
    default = distributed.distributed_c10d._get_default_group()
    if ddp.process_group is not default:
        raise DistributedUnsupportedError(
            "a DistributedDataParallel module on a process group other than the default one "
            "cannot be re-created at resume yet; wrap the model on the default group (the one "
            "init_process_group made), or checkpoint it in your own code with torch.distributed"
            ".checkpoint"
        )
    return rebuild_ddp, (ddp.__getstate__(), bucket_layout(ddp))


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


def rebuild_ddp(state: dict[str, Any], layout: list[list[int]] | None) -> Any:
    """A DDP on this process's default group from its pickled state, its reducer built with
    ``layout`` (None: DDP's initial one)."""
    torch = _torch()
    ddp = torch.nn.parallel.DistributedDataParallel.__new__(
        torch.nn.parallel.DistributedDataParallel
    )
    if not layout:
        ddp.__setstate__(state)
        return ddp
    with _assigned(layout, int(state.get("bucket_bytes_cap", 25 * 1024 * 1024))):
        ddp.__setstate__(state)
    return ddp
