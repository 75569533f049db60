"""The memory a job's process holds now, as the node reports it ("its resident and GPU memory now").

Resident memory is read from ``/proc`` (the process's ``VmRSS``). GPU memory joins it where
NVIDIA's management library answers (``nvidia-ml-py``, the ``gpu`` extra: ``pip install
'portal-spot[gpu]'``): the device memory each GPU's driver has given the job's processes, read from
outside them, as ``nvidia-smi`` reads it (the job's own allocator cache included: what the
process holds is what a move must find room for). On a machine without NVIDIA's driver or the
library the figure is the resident memory alone. It overstates a checkpoint either way, which is
why Portal acts on it alone only a quarter over a bound.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["child_pids", "gpu_bytes", "memory_bytes", "resident_bytes"]

log = logging.getLogger("portal.node")

_nvml: Any = None  # the initialised library, False when it cannot be used on this machine
_nvml_lock = threading.Lock()


def resident_bytes(pid: int) -> int | None:
    """The process's resident memory now (``VmRSS`` of ``/proc/PID/status``), or None."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def _library() -> Any:
    """NVML, initialised once per process; None where it cannot be used (no library, no
    driver, no GPU): asked once, then never again."""
    global _nvml
    with _nvml_lock:
        if _nvml is None:
            _nvml = False
            try:
                import pynvml

                pynvml.nvmlInit()
            except ImportError:
                pass  # the gpu extra is not installed: resident memory alone
            except Exception as exc:  # pynvml.NVMLError: no driver, no device
                log.info("GPU memory is not measured here: %s", exc)
            else:
                _nvml = pynvml
        return _nvml or None


def gpu_bytes(pids: Iterable[int]) -> int | None:
    """The device memory the GPUs' drivers have given ``pids`` now, summed over every GPU; None
    where it cannot be read (no NVIDIA driver or library here)."""
    nvml = _library()
    if nvml is None:
        return None
    wanted = set(pids)
    total = 0
    try:
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used = process.usedGpuMemory
                if process.pid in wanted and used:  # None where the driver does not say
                    total += int(used)
    except Exception as exc:  # pynvml.NVMLError: a device lost meanwhile
        log.info("GPU memory could not be read now: %s", exc)
        return None
    return total


def memory_bytes(pids: Iterable[int]) -> int | None:
    """The figure "its resident and GPU memory now": ``pids``' resident memory plus what they
    hold on the GPUs (when it can be read); None when no process could be read."""
    pids = list(pids)
    resident = [r for r in (resident_bytes(p) for p in pids) if r is not None]
    if not resident:
        return None
    return sum(resident) + (gpu_bytes(pids) or 0)


def child_pids(pid: int | None = None) -> list[int]:
    """The direct children of ``pid`` (default: this process), e.g. a node's job process."""
    me = os.getpid() if pid is None else pid
    try:
        text = Path(f"/proc/{me}/task/{me}/children").read_text()
    except OSError:
        return []
    return [int(word) for word in text.split()]
