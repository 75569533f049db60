"""Checkpoint of tensor state (a model and its Adam state) through Portal's capture image, side by
side with ``torch.save`` / ``torch.load`` on the same disk, in the same run.

Run: ``python benchmarks/bench_tensors.py [--gb 1] [--repeat 1] [--dir DIR] [--device cuda]
[--json FILE]`` (``--gb 4`` for the large case; on the CPU it needs about 3x the state in free
memory). Needs ``torch`` (the local CPU wheel; a CUDA build for ``--device cuda``, which a lent
accelerator runs through ``benchmarks/gpu_check.sh``).

Each operation runs in a fresh process, so one's memory never flatters another's:

- save: Portal pickles ``{"model", "optimizer"}`` with the capture reducers (storages out of
  band, straight from tensor memory) and writes the image file; torch saves the same dict.
  Both files are flushed and fsynced.
- restore: Portal reads and verifies the image and unpickles it (the buffers read become the
  tensors' memory); torch loads its file (``weights_only=False``, as a checkpoint of arbitrary
  state needs).

Peak extra memory is the highest resident set size sampled (every 2 ms) during the operation,
above the resident size right before it; for a restore, above that plus the state itself (the
restored tensors are the point, not overhead). Targets: save and restore each >= 1.2x faster
than torch's, peak extra memory <= 10% of the state.

With ``--device cuda`` the state lives on the GPU (torch loads with ``map_location="cuda"``; a
restore's extra host memory is all of its resident growth, since the state is on the GPU), and
two more measures run:

- pause: the real runtime (``python -m portal.runtime run``) holds the state in a script, is
  asked to pause through its control socket as the node asks, and reports the seconds from the
  safe point to the checkpoint's last byte fsynced (its ``paused`` event); the runtime process's
  resident peak is sampled from outside;
- copies: GPU->host bandwidth of one large ``copy_`` into pinned memory timed with CUDA events
  (the device's copy bandwidth, the reference), Portal's staged copy (two pinned chunks in turn,
  as a save fetches a GPU storage), ``tensor.cpu()``; host->GPU the same way (Portal's pinned
  upload against ``.to("cuda")`` from pageable memory); CRC-32 on one thread and on Portal's
  pool. Target: the staged copy >= 80% of the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * _PAGE


class PeakSampler:
    """The highest resident set size seen while it runs (a thread sampling /proc/self/statm)."""

    def __init__(self) -> None:
        self.start = _rss()
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _rss())

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())


def build_state(nbytes: int, device: str = "cpu") -> dict[str, Any]:
    """A float32 MLP and its Adam state (exp_avg, exp_avg_sq): parameters are a third of it."""
    import torch

    torch.manual_seed(0)
    width = 4096
    per_layer = (width * width + width) * 4 * 3  # weight+bias, and Adam's two moments
    layers = max(1, round(nbytes / per_layer))
    with torch.device(device):
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for p in model.parameters():  # one step's worth of state, without a backward pass
        opt.state[p] = {
            "step": torch.tensor(1.0),
            "exp_avg": torch.randn_like(p),
            "exp_avg_sq": torch.rand_like(p),
        }
    _sync(device)
    return {"model": model, "optimizer": opt}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def state_bytes(state: dict[str, Any]) -> int:
    total = sum(p.nbytes for p in state["model"].parameters())
    for entry in state["optimizer"].state.values():
        total += sum(v.nbytes for v in entry.values())
    return total


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def child(mode: str, nbytes: int, directory: Path, device: str = "cpu") -> dict[str, Any]:
    import pickle

    import torch

    from portal.capture._plugins import load_reducers
    from portal.capture.image import (
        CheckpointImage,
        Header,
        InterpreterInfo,
        read_image,
        write_image,
    )
    from portal.capture.pickler import dumps, resolve_reducers

    portal_file, torch_file = directory / "state.portal", directory / "state.pt"
    result: dict[str, Any] = {"mode": mode}
    if mode == "copies":
        return copies(nbytes, device)
    if mode == "pause":
        return runtime_pause(nbytes, directory, device)
    if mode.endswith("save"):
        state = build_state(nbytes, device)
        result["state"] = state_bytes(state)
        reducers = resolve_reducers(load_reducers())
        with PeakSampler() as mem:
            t0 = time.perf_counter()
            if mode == "portal-save":
                data, buffers, _ = dumps(state, namespaces={}, reducers=reducers)
                header = Header(
                    interpreter=InterpreterInfo.current(),
                    script="bench",
                    argv=[],
                    cwd="/",
                    created=time.time(),
                )
                write_image(
                    CheckpointImage(header=header, pickle=data, buffers=buffers), portal_file
                )
            else:
                with open(torch_file, "wb") as fh:
                    torch.save(state, fh)
                    fh.flush()
                    os.fsync(fh.fileno())
            result["seconds"] = time.perf_counter() - t0
        result["extra"] = mem.peak - mem.start
    else:
        path = portal_file if mode == "portal-load" else torch_file
        _fsync(path)
        with PeakSampler() as mem:
            t0 = time.perf_counter()
            if mode == "portal-load":
                image = read_image(path)
                state = pickle.loads(image.pickle, buffers=image.buffers)
                del image
            else:
                state = torch.load(path, weights_only=False, map_location=device)
            _sync(device)
            result["seconds"] = time.perf_counter() - t0
        result["state"] = state_bytes(state)
        on_host = 0 if device.startswith("cuda") else result["state"]
        result["extra"] = mem.peak - mem.start - on_host
        result["device"] = str(next(iter(state["model"].parameters())).device)
        probe = next(iter(state["model"].parameters()))
        result["check"] = float(probe.detach().view(-1)[:1000].sum())
    return result


def copies(nbytes: int, device: str) -> dict[str, Any]:
    """Copy bandwidths between the GPU and the host, and CRC-32 rates (see the docstring)."""
    import zlib

    import torch

    from portal.capture.crc import ParallelCrc
    from portal.capture.extensions import tensors

    size = min(nbytes, 4 << 30)
    dev = torch.randint(0, 255, (size,), dtype=torch.uint8, device=device)
    pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    pageable = torch.empty(size, dtype=torch.uint8)
    pageable.fill_(1)  # touched: no page faults inside the timed copies

    def events_gbps(dst: Any, src: Any) -> float:
        dst.copy_(src, non_blocking=True)  # warm
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        return size / (start.elapsed_time(end) / 1e3) / 1e9

    def wall_gbps(fn: Any) -> float:
        fn()  # warm (pinned chunks come from torch's caching host allocator after this)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return size / (time.perf_counter() - t0) / 1e9

    def staged_fetch() -> None:
        for _chunk in tensors.DeviceBuffer(dev.untyped_storage()).chunks(lambda: None):
            pass

    view = memoryview(pageable.numpy()).cast("B")
    result: dict[str, Any] = {"mode": "copies", "bytes": size}
    result["d2h_reference"] = events_gbps(pinned, dev)
    result["d2h_staged"] = wall_gbps(staged_fetch)
    result["d2h_cpu"] = wall_gbps(lambda: dev.cpu())
    result["h2d_reference"] = events_gbps(dev, pinned)
    result["h2d_staged"] = wall_gbps(lambda: tensors.upload(view, device))
    result["h2d_pageable"] = wall_gbps(lambda: pageable.to(device))
    data = memoryview(pinned.numpy()).cast("B")
    t0 = time.perf_counter()
    zlib.crc32(data)
    result["crc_one_thread"] = size / (time.perf_counter() - t0) / 1e9
    t0 = time.perf_counter()
    parallel = ParallelCrc()
    parallel.feed(data)
    parallel.result()
    result["crc_pool"] = size / (time.perf_counter() - t0) / 1e9
    return result


_HOLDER = """
import sys, time
sys.path.insert(0, {bench!r})
from bench_tensors import build_state
state = build_state({nbytes}, {device!r})
print("ready", flush=True)
while True:
    time.sleep(0.005)
"""


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def runtime_pause(nbytes: int, directory: Path, device: str) -> dict[str, Any]:
    """The real runtime pauses a script holding the state: its own report of the write."""
    import socket

    script, ckpt = directory / "holder.py", directory / "paused.portal"
    script.write_text(
        _HOLDER.format(bench=str(Path(__file__).parent), nbytes=nbytes, device=device)
    )
    sock_dir = tempfile.mkdtemp(prefix="pb", dir="/tmp")
    sock_path = os.path.join(sock_dir, "c.sock")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "portal.runtime",
            "run",
            "--checkpoint",
            str(ckpt),
            "--control",
            sock_path,
            str(script),
        ],
        stdout=subprocess.PIPE,
        cwd=directory,
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == b"ready"
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(sock_path)
        lines = conn.makefile("rb")
        lines.readline()  # hello
        before = _status_kib(proc.pid, "VmRSS") * 1024
        peak = before
        conn.sendall(json.dumps({"op": "pause", "deadline": time.time() + 600}).encode() + b"\n")
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.wait(0.002):
                try:
                    peak = max(peak, _status_kib(proc.pid, "VmRSS") * 1024)
                except (OSError, ValueError):
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        while True:
            event = json.loads(lines.readline())
            if event["event"] in ("paused", "failed", "abandoned"):
                break
        stop.set()
        sampler.join()
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if event["event"] != "paused":
        raise RuntimeError(f"the runtime did not pause: {event}")
    size = ckpt.stat().st_size
    ckpt.unlink()
    return {
        "mode": "pause",
        "seconds": event["seconds_to_write"],
        "to_safe_point": event["seconds_to_safe_point"],
        "bytes": size,
        "extra": peak - before,
    }


def run_child(mode: str, nbytes: int, directory: Path, device: str = "cpu") -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            mode,
            "--bytes",
            str(nbytes),
            "--dir",
            str(directory),
            "--device",
            device,
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{mode} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="tensor state in GB (default 1)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (one disk)")
    parser.add_argument("--device", default="cpu", help="where the state lives: cpu or cuda")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--bytes", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.bytes, args.dir, args.device)))
        return
    try:
        import torch
    except ImportError:
        sys.exit("bench_tensors needs torch (pip install torch==2.13.0 from the local wheel)")
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("bench_tensors --device cuda: this machine has no CUDA GPU; skipped")
        return
    nbytes = int(args.gb * 1e9)
    best: dict[str, dict[str, Any]] = {}
    sizes: dict[str, int] = {}

    def keep(r: dict[str, Any]) -> None:
        mode = r["mode"]
        if mode not in best or r.get("seconds", 0) < best[mode].get("seconds", 0):
            best[mode] = r

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        for _ in range(args.repeat):
            # One tool's file at a time on the disk: a GPU's state is large.
            for tool, name in (("portal", "state.portal"), ("torch", "state.pt")):
                keep(run_child(f"{tool}-save", nbytes, directory, args.device))
                sizes[tool] = os.path.getsize(directory / name)
                keep(run_child(f"{tool}-load", nbytes, directory, args.device))
                (directory / name).unlink()
            keep(run_child("pause", nbytes, directory, args.device))
        if cuda:
            keep(run_child("copies", nbytes, directory, args.device))
    state = best["portal-save"]["state"]
    assert best["portal-load"]["check"] == best["torch-load"]["check"], "restored states differ"
    gib = state / 2**30
    print(
        f"tensor state {state / 1e9:.2f} GB ({gib:.2f} GiB) on {args.device}; files: portal "
        f"{sizes['portal'] / 1e9:.3f} GB, torch {sizes['torch'] / 1e9:.3f} GB; best of {args.repeat}"
    )
    print(
        f"{'':10} {'portal s':>9} {'torch s':>9} {'speedup':>8} {'portal extra':>13} {'torch extra':>12}   targets"
    )
    for op in ("save", "load"):
        p, t = best[f"portal-{op}"], best[f"torch-{op}"]
        print(
            f"{op:10} {p['seconds']:9.3f} {t['seconds']:9.3f} {t['seconds'] / p['seconds']:7.2f}x "
            f"{100 * p['extra'] / state:12.1f}% {100 * t['extra'] / state:11.1f}%   "
            f">= 1.20x, <= 10%"
        )
    if "pause" in best:
        p, t = best["pause"], best["torch-save"]
        print(
            f"{'pause':10} {p['seconds']:9.3f} {t['seconds']:9.3f} {t['seconds'] / p['seconds']:7.2f}x "
            f"{100 * p['extra'] / state:12.1f}% {100 * t['extra'] / state:11.1f}%   "
            "(the runtime's own report: safe point to last byte fsynced)"
        )
    if "copies" in best:
        c = best["copies"]
        print(
            f"GPU->host GB/s: reference {c['d2h_reference']:.1f}, Portal staged {c['d2h_staged']:.1f} "
            f"({100 * c['d2h_staged'] / c['d2h_reference']:.0f}%, target >= 80%), "
            f"tensor.cpu() {c['d2h_cpu']:.1f}"
        )
        print(
            f"host->GPU GB/s: reference {c['h2d_reference']:.1f}, Portal upload {c['h2d_staged']:.1f}, "
            f"pageable .to() {c['h2d_pageable']:.1f}; CRC-32 GB/s: one thread "
            f"{c['crc_one_thread']:.1f}, pool {c['crc_pool']:.1f}"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"device": args.device, "state": state, "files": sizes, **best}, indent=1)
        )


if __name__ == "__main__":
    main()
