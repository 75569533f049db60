"""Benchmark of the node's checkpoint upload: streamed while written vs written, then uploaded.

    python benchmarks/bench_checkpoint_stream.py              # 256 MB state
    python benchmarks/bench_checkpoint_stream.py --size-mb 64

The producer is a process of its own, as the runtime is: it builds a real checkpoint image, says
it is ready, and on the word writes it the way the runtime does (a temporary file, fsync,
rename); the clock runs from that word. The store is a local one under a temporary directory.
Two ways from the pause to the stored checkpoint, measured in the same run:

* sequential (the node before streaming): write the whole file, then upload it;
* streamed (``portal.node.stream.CheckpointStream``): the upload reads the file as it grows.

Prints both times and their ratio; the target is streamed <= 0.75x sequential (about
max(write, upload) instead of their sum, when the two take similar time).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from portal.capture.image import CheckpointImage, Header, InterpreterInfo, iter_image_chunks
from portal.node.stream import CheckpointStream
from portal.storage import CheckpointStore, MemoryKeyStore

JOB = "j-0123456789"
PIECE = 4 * 2**20


def make_image(size: int) -> CheckpointImage:
    rng = random.Random(7)
    header = Header(
        interpreter=InterpreterInfo.current(), script="/x/t.py", argv=["t.py"], cwd="/x", created=1
    )
    half = size // 2
    return CheckpointImage(
        header=header,
        pickle=rng.randbytes(half),
        buffers=[memoryview(rng.randbytes(size - half))],
    )


def write_like_the_runtime(image: CheckpointImage, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as out:
        for chunk in iter_image_chunks(image):
            view = memoryview(chunk)
            for start in range(0, len(view), PIECE):
                out.write(view[start : start + PIECE])
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(target)


def fresh_store(root: Path) -> CheckpointStore:
    shutil.rmtree(root, ignore_errors=True)
    store = CheckpointStore(root.as_uri(), MemoryKeyStore())
    store.create_job_key(JOB)
    return store


class Producer:
    """``python bench_checkpoint_stream.py --produce SIZE TARGET`` in a process of its own."""

    def __init__(self, size_mb: int, target: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--size-mb", str(size_mb), "--produce", str(target)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None and self.process.stdout.readline() == b"ready\n"

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        self.process.stdin.flush()

    def wait(self) -> None:
        if self.process.wait() != 0:
            raise SystemExit("the producer failed")


def produce(size_mb: int, target: Path) -> int:
    image = make_image(size_mb * 10**6)
    print("ready", flush=True)
    sys.stdin.readline()
    write_like_the_runtime(image, target)
    return 0


def sequential(size_mb: int, work: Path) -> tuple[float, float]:
    """The whole time, and the part the write took."""
    store = fresh_store(work / "store-seq")
    target = work / "seq.portal"
    target.unlink(missing_ok=True)
    producer = Producer(size_mb, target)
    started = time.perf_counter()
    producer.go()
    producer.wait()
    written = time.perf_counter() - started
    with store.open_writer(JOB, expected_bytes=target.stat().st_size) as writer:
        with target.open("rb") as src:
            while piece := src.read(PIECE):
                writer.write(piece)
        writer.commit({})
    return time.perf_counter() - started, written


def streamed(size_mb: int, work: Path) -> float:
    store = fresh_store(work / "store-stream")
    target = work / "stream.portal"
    target.unlink(missing_ok=True)
    producer = Producer(size_mb, target)
    stream = CheckpointStream(store, JOB, target, deadline=None, summary={}).start()
    started = time.perf_counter()
    producer.go()
    producer.wait()
    stream.producer_exited()
    stream.result()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--produce", metavar="TARGET", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.produce:
        return produce(options.size_mb, Path(options.produce))
    with tempfile.TemporaryDirectory(prefix="portal-bench-stream-") as tmp:
        work = Path(tmp)
        seq, written = min(sequential(options.size_mb, work) for _ in range(2))
        st = min(streamed(options.size_mb, work) for _ in range(2))
    print(f"checkpoint of {options.size_mb} MB, pause to stored (best of 2):")
    print(f"  sequential (write, then upload) {seq:7.2f} s (the write {written:.2f} s)")
    print(f"  streamed while written          {st:7.2f} s")
    print(f"  ratio streamed/sequential        {st / seq:6.2f}x (target <= 0.75x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
