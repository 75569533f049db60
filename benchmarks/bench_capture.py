"""Benchmarks of Portal's capture engine. Run: ``python benchmarks/bench_capture.py [--quick]``.

Prints three tables:

1. idle overhead: each workload alternately plain and armed (the engine's signal handlers and a
   control channel with its watcher thread) in the same process, as a CPU-time ratio
   (target: <= 1.01);
2. notice -> safe point latency, p50/p99, for SIGTERM and for a node request over the control
   socket (target p99 <= 5 ms), measured from the sender's clock to the safe point's, in a
   loop of the script's own and in one of an installed library's (a framework's loop);
3. capture + serialize (+ write) time against state size, in process.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def tight_loop() -> int:
    total = 0
    for i in range(3_000_000):
        total += i * i % 7
    return total


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def recursive() -> int:
    return fib(25)


class Node:
    def __init__(self, key: int, payload: dict[str, object]) -> None:
        self.key = key
        self.payload = payload
        self.children: list[Node] = []


def object_heavy() -> int:
    nodes = {}
    for i in range(200_000):
        node = Node(i, {"v": i, "s": str(i)})
        nodes[i] = node
        if i:
            nodes[i // 2].children.append(node)
    return sum(len(n.children) for n in nodes.values())


WORKLOADS = {"tight loop": tight_loop, "recursive": recursive, "object-heavy": object_heavy}

BUSY = """
import sys, time
print("ready", flush=True)
def spin():
    x = 0
    while True:
        x += 1
spin()
"""


def _runtime(*args: str) -> list[str]:
    return [sys.executable, "-m", "portal.runtime", *args]


def _connect(proc: subprocess.Popen[bytes], path: str) -> socket.socket:
    while True:
        if proc.poll() is not None:
            raise RuntimeError("runtime exited early")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            s.makefile("rb").readline()  # hello
            return s
        except (FileNotFoundError, ConnectionRefusedError):
            s.close()
            time.sleep(0.005)


def idle_overhead(work: Path, rounds: int) -> list[tuple[str, float, float, float, float]]:
    """Each workload in this process, alternately plain and armed (an engine with its signal
    handlers and a control channel whose watcher thread waits), timed in CPU seconds."""
    from portal.capture.engine import Engine
    from portal.capture.snapshot import CaptureContext
    from portal.capture.usercode import UserCode
    from portal.runtime.control import ControlChannel

    ctx = CaptureContext(user_code=UserCode(__file__), main_namespace=globals())
    rows = []
    for name, workload in WORKLOADS.items():
        times: dict[str, list[float]] = {"plain": [], "armed": []}
        for i in range(rounds):
            for mode in ("plain", "armed") if i % 2 == 0 else ("armed", "plain"):
                channel = engine = None
                if mode == "armed":
                    channel = ControlChannel(str(work / "idle.sock"))
                    engine = Engine(ctx, checkpoint_path=work / "idle.portal", notify=channel.send)
                    engine.arm()
                    channel.start(engine)
                gc.collect()
                t0 = time.process_time()
                workload()
                times[mode].append(time.process_time() - t0)
                if engine is not None and channel is not None:
                    engine.disarm()
                    channel.close()
        p, a = min(times["plain"]), min(times["armed"])
        # Paired by round (each round runs both, in alternating order): robust to a noisy host.
        ratio_median = statistics.median(
            a / p for a, p in zip(times["armed"], times["plain"], strict=True)
        )
        rows.append((name, p, a, a / p, ratio_median))
    return rows


#: The same busy loop in an installed library's function (a framework's training loop): its
#: frames have safe points too (portal.capture.libraries).
BUSY_LIBRARY = """
from spinlib import spin
print("ready", flush=True)
spin()
"""
SPIN_LIBRARY = """
def spin():
    x = 0
    while True:
        x += 1
"""


def latency(work: Path, trials: int, via: str, *, in_library: bool = False) -> list[float]:
    script = work / "busy.py"
    script.write_text(BUSY_LIBRARY if in_library else BUSY)
    env = dict(os.environ)
    if in_library:  # outside the script's directory: a library, not the user's own module
        library = Path(tempfile.mkdtemp(prefix="pbenchlib", dir="/tmp"))
        (library / "spinlib.py").write_text(SPIN_LIBRARY)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(library), env.get("PYTHONPATH")]))
    results = []
    for i in range(trials):
        sock = str(work / f"l{i}.sock")
        ckpt = work / f"l{i}.portal"
        proc = subprocess.Popen(
            _runtime("run", "--control", sock, "--checkpoint", str(ckpt), str(script)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=work,
            env=env,
        )
        conn = _connect(proc, sock)
        assert proc.stdout is not None
        proc.stdout.readline()  # "ready": the loop is running
        time.sleep(0.05)
        t0 = time.time()
        if via == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            conn.sendall(json.dumps({"op": "pause", "deadline": t0 + 10}).encode() + b"\n")
        proc.communicate(timeout=60)
        conn.close()
        if proc.returncode != 75:
            raise RuntimeError(f"trial {i}: exit {proc.returncode}")
        from portal.capture.image import read_image

        results.append(read_image(ckpt).header.safe_point_time - t0)
        ckpt.unlink()
    return results


STATE: object = None


def _capture_once(ckpt: Path) -> tuple[float, float, int, int]:
    return _snapshot_of_caller(ckpt)  # this frame is the paused one: it holds no frame objects


def _snapshot_of_caller(ckpt: Path) -> tuple[float, float, int, int]:
    from portal.capture.image import write_image
    from portal.capture.snapshot import CaptureContext, check_position, take_snapshot
    from portal.capture.usercode import UserCode

    ctx = CaptureContext(user_code=UserCode(__file__), main_namespace=globals())
    frame = sys._getframe(1)
    t0 = time.perf_counter()
    chain = check_position(frame, ctx)
    assert isinstance(chain, list), chain
    result = take_snapshot(frame, chain, ctx)
    t1 = time.perf_counter()
    assert result.image is not None, result.problems
    size = write_image(result.image, ckpt)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, len(result.image.pickle), size


def _small_dicts(n: int) -> list[dict[str, object]]:
    return [{"i": i, "s": str(i), "l": [i, i + 1]} for i in range(n)]


def capture_scaling(work: Path, quick: bool) -> list[tuple[str, int, float, float, float]]:
    """The state is one global (``STATE``) of growing size; the rest of the program is small."""
    global STATE
    rows = []
    sizes: list[tuple[str, str, int]] = [
        (f"{n:,} small dicts", "dicts", n)
        for n in ((1_000, 10_000) if quick else (1_000, 10_000, 100_000))
    ]
    try:
        import numpy
    except ImportError:
        numpy = None  # type: ignore[assignment]
    if numpy is not None:
        sizes += [
            (f"numpy array {mb} MiB", "array", mb) for mb in ((1, 16) if quick else (1, 16, 256))
        ]
    for label, kind, n in sizes:
        STATE = _small_dicts(n) if kind == "dicts" else numpy.ones(n * (1 << 20) // 8)
        runs = []
        for _ in range(3):  # a plain loop: a generator frame on the chain has no safe point
            runs.append(_capture_once(work / "s.portal"))
        capture_s, write_s, _pickle_bytes, size = min(runs, key=lambda r: r[0])
        rows.append((label, size, capture_s, write_s, size / max(capture_s + write_s, 1e-9) / 1e6))
        STATE = None
    return rows


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats and sizes")
    return parser.parse_args()


def main() -> None:
    options = _options()
    work = Path(tempfile.mkdtemp(prefix="pbench", dir="/tmp"))
    try:
        print(f"Python {sys.version.split()[0]} on {os.cpu_count()} CPUs\n")
        rounds = 5 if options.quick else 15
        print(f"1. Idle overhead, armed vs plain in this process (CPU s, {rounds} rounds each)")
        print(
            f"   {'workload':<14} {'plain min':>10} {'armed min':>10} {'ratio':>7} {'paired median':>14}"
        )
        for name, p, a, r, rm in idle_overhead(work, rounds):
            print(f"   {name:<14} {p:>10.4f} {a:>10.4f} {r:>7.3f} {rm:>14.3f}")
        trials = 15 if options.quick else 50
        print(f"\n2. Notice -> safe point latency ({trials} trials each, busy pure-Python loop)")
        print(f"   {'via':<18} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}")
        for via, in_library in (
            ("sigterm", False),
            ("node", False),
            ("sigterm", True),
            ("node", True),
        ):
            lat = latency(work, trials, via, in_library=in_library)
            label = f"{via}{' (library)' if in_library else ''}"
            print(
                f"   {label:<18} {_pct(lat, 0.5) * 1e3:>9.2f} {_pct(lat, 0.99) * 1e3:>9.2f} "
                f"{max(lat) * 1e3:>9.2f}"
            )
        print("\n3. Capture + serialize, and write (fsync'd), vs state size (best of 3)")
        print(f"   {'state':<24} {'file MB':>9} {'capture ms':>11} {'write ms':>9} {'MB/s':>8}")
        for label, size, cap, wr, rate in capture_scaling(work, options.quick):
            print(
                f"   {label:<24} {size / 1e6:>9.2f} {cap * 1e3:>11.1f} {wr * 1e3:>9.1f} {rate:>8.0f}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
