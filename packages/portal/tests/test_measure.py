"""The node's measure of a job ("its resident and GPU memory now"), on this machine: resident
memory from /proc; GPU memory from NVIDIA's management library where a driver answers (none
here: the library is installed with the gpu extra and finds no driver, so GPU memory is not
part of the figure and nothing fails)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from portal.node import measure


def test_without_an_nvidia_driver_the_figure_is_resident_memory() -> None:
    pytest.importorskip("pynvml", reason="the gpu extra (nvidia-ml-py) is not installed")
    if os.path.exists("/proc/driver/nvidia"):
        pytest.skip("this machine has an NVIDIA driver: see the GPU device check")
    me = os.getpid()
    assert measure.gpu_bytes([me]) is None  # the real library, asked: no driver here
    resident = measure.resident_bytes(me)
    held = measure.memory_bytes([me])
    assert resident is not None and held is not None
    assert abs(held - resident) < 64 * 2**20  # the same figure (read a moment apart)


def test_a_process_that_grows_is_measured_larger() -> None:
    grower = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; b = bytearray(200 * 2**20); print(1, flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert grower.stdout is not None and grower.stdout.readline().strip() == "1"
        held = measure.memory_bytes([grower.pid])
        assert held is not None and held >= 200 * 2**20
    finally:
        grower.kill()
        grower.communicate()  # reaped, and its pipes closed
    assert measure.memory_bytes([grower.pid]) is None  # gone: nothing to measure


@pytest.mark.gpu
def test_gpu_memory_a_job_holds_joins_the_figure() -> None:
    """On a lent accelerator: a process holding 1 GiB on its GPU is measured with it."""
    pytest.importorskip("pynvml", reason="the gpu extra (nvidia-ml-py) is not installed")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, torch; t = torch.empty(2**28, device='cuda'); "
            "torch.cuda.synchronize(); print(1, flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "1"
        on_gpu = measure.gpu_bytes([holder.pid])
        assert on_gpu is not None and on_gpu >= 2**30
        held = measure.memory_bytes([holder.pid])
        assert held is not None and held >= on_gpu + (measure.resident_bytes(holder.pid) or 0) // 2
    finally:
        holder.kill()
        holder.communicate()
