"""Checkpoint of tensor state (a model and its Adam state) through Portal's capture image, side by
side with ``torch.save`` / ``torch.load`` on the same disk, in the same run.

Run: ``python benchmarks/bench_tensors.py [--gb 1] [--repeat 1] [--dir DIR]`` (``--gb 4`` for the
large case; needs about 3x the state in free memory). Needs ``torch`` (the local CPU wheel).

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


def build_state(nbytes: int) -> dict[str, Any]:
    """A float32 MLP and its Adam state (exp_avg, exp_avg_sq): parameters are a third of it."""
    import torch

    torch.manual_seed(0)
    width = 4096
    per_layer = (width * width + width) * 4 * 3  # weight+bias, and Adam's two moments
    layers = max(1, round(nbytes / per_layer))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for p in model.parameters():  # one step's worth of state, without a backward pass
        opt.state[p] = {
            "step": torch.tensor(1.0),
            "exp_avg": torch.randn_like(p),
            "exp_avg_sq": torch.rand_like(p),
        }
    return {"model": model, "optimizer": opt}


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


def child(mode: str, nbytes: int, directory: Path) -> dict[str, Any]:
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
    if mode.endswith("save"):
        state = build_state(nbytes)
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
                state = torch.load(path, weights_only=False)
            result["seconds"] = time.perf_counter() - t0
        result["state"] = state_bytes(state)
        result["extra"] = mem.peak - mem.start - result["state"]
        probe = next(iter(state["model"].parameters()))
        result["check"] = float(probe.detach().view(-1)[:1000].sum())
    return result


def run_child(mode: str, nbytes: int, directory: Path) -> dict[str, Any]:
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
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="tensor state in GB (default 1)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (one disk)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--bytes", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.bytes, args.dir)))
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("bench_tensors needs torch (pip install torch==2.13.0 from the local wheel)")
    nbytes = int(args.gb * 1e9)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        best: dict[str, dict[str, Any]] = {}
        for _ in range(args.repeat):
            for mode in ("portal-save", "torch-save", "portal-load", "torch-load"):
                r = run_child(mode, nbytes, directory)
                if mode not in best or r["seconds"] < best[mode]["seconds"]:
                    best[mode] = r
        sizes = {
            m: os.path.getsize(directory / f)
            for m, f in (("portal", "state.portal"), ("torch", "state.pt"))
        }
    state = best["portal-save"]["state"]
    assert best["portal-load"]["check"] == best["torch-load"]["check"], "restored states differ"
    gib = state / 2**30
    print(
        f"tensor state {state / 1e9:.2f} GB ({gib:.2f} GiB); files: portal {sizes['portal'] / 1e9:.3f} GB, torch {sizes['torch'] / 1e9:.3f} GB; best of {args.repeat}"
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


if __name__ == "__main__":
    main()
