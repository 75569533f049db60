"""torch.distributed objects a rank's checkpoint refuses by name: sharded or remote state whose
meaning depends on how it is split across ranks, which a per-rank capture cannot re-create.

Each becomes a value the checkpoint cannot carry (``CAPTURE_DISTRIBUTED_UNSUPPORTED``, a
``TypeError``): the pause names it, and the way out: torch.distributed.checkpoint (DCP) in the
program's own code, which knows each shard's place, or bladekit's explicit checkpoints.
Keyed by type name like every reducer, so a program that never imported them pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from portal.capture.distributed.ddp import DistributedUnsupportedError

__all__ = ["REFUSED", "refused_reducers"]

_WAY_OUT = (
    "save it with torch.distributed.checkpoint (DCP) in your own code, or use bladekit's "
    "save_checkpoint / load_checkpoint"
)

#: Type name -> what it is, as the refusal says it.
REFUSED: dict[str, str] = {
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel": "FSDP",
    "torch.distributed.fsdp._fully_shard._fully_shard.FSDPModule": "FSDP2 (fully_shard)",
    "torch.distributed.tensor.DTensor": "a DTensor (tensor parallelism, FSDP2)",
    "torch.distributed.tensor._api.DTensor": "a DTensor (tensor parallelism, FSDP2)",
    "torch.distributed._shard.sharded_tensor.api.ShardedTensor": "a ShardedTensor",
    "torch.distributed.optim.zero_redundancy_optimizer.ZeroRedundancyOptimizer": "ZeRO "
    "(ZeroRedundancyOptimizer)",
    "torch.distributed.pipelining.stage._PipelineStageBase": "a pipeline-parallel stage",
    "torch.distributed.pipelining.schedules._PipelineSchedule": "a pipeline-parallel schedule",
    "torch._C._distributed_rpc.PyRRef": "an RPC remote reference (RRef)",
}


def _refuse(what: str) -> Callable[[Any], NoReturn]:
    def refuse(obj: Any) -> NoReturn:
        raise DistributedUnsupportedError(
            f"{what} is sharded or remote across the ranks, and Portal's per-rank checkpoint "
            f"cannot re-create it at resume: {_WAY_OUT}"
        )

    return refuse


def refused_reducers() -> dict[str, Callable[[Any], Any]]:
    return {name: _refuse(what) for name, what in REFUSED.items()}
