"""Benchmark of portal-storage: checkpoint writes against plain writes, and incremental cost.

    python benchmarks/bench_storage.py              # 512 MB state
    python benchmarks/bench_storage.py --large      # 2 GB state
    python benchmarks/bench_storage.py --size-mb 128 --s3-size-mb 64

Prints one table. Rows:
* local disk: the store (chunk, fingerprint, encrypt, pack, parallel atomic writes, fsync) vs one plain
  sequential write of the same bytes (fsync at the end); target >= 0.8x;
* S3 emulator (moto server on 127.0.0.1): the store vs a plain s3fs ``put_file``; target >= 0.9x;
* incremental: bytes a second checkpoint uploads after changing 1% of the state; target <= 3%;
* independent restore points: a line of 16 checkpoints, 1% changed before each, stored with a
  full copy every 4th (the default) against never; the extra bytes per checkpoint, as a share of
  the state; target <= 25%.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "packages" / "storage" / "tests"))

import storage_emulators as emu  # noqa: E402

emu.apply_safe_env()

from portal.storage import CheckpointStore, MemoryKeyStore  # noqa: E402

PIECE = 64 * 2**20  # the producer hands over 64 MiB at a time


def make_state(size: int) -> bytes:
    # Random bytes: incompressible, like trained weights; generated fast in 64 MiB blocks.
    rng = random.Random(7)
    return b"".join(rng.randbytes(min(PIECE, size - i)) for i in range(0, size, PIECE))


def store_write(store: CheckpointStore, job: str, data: bytes) -> tuple[float, int]:
    # The producer hands over read-only views of bytes it made (as the plain write gets `data`
    # itself): slicing `data` here would time a copy of the whole state, not the store.
    view = memoryview(data)
    start = time.perf_counter()
    with store.open_writer(job, expected_bytes=len(data)) as writer:
        for i in range(0, len(data), PIECE):
            writer.write(view[i : i + PIECE])
        writer.commit()
        uploaded = writer.progress().bytes_uploaded
    return time.perf_counter() - start, uploaded


def plain_local_write(path: Path, data: bytes) -> float:
    start = time.perf_counter()
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - start


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def bench_local(data: bytes, work: Path) -> tuple[float, float, float, float]:
    """Best wall time of each (three tries, alternating which goes first: the machine's other
    load moves between tries), and the CPU seconds each used in its best try."""
    best_plain = best_store = float("inf")
    cpu_plain = cpu_store = 0.0

    def plain(attempt: int) -> None:
        nonlocal best_plain, cpu_plain
        target = work / f"plain-{attempt}.bin"
        cpu = _cpu()
        took = plain_local_write(target, data)
        if took < best_plain:
            best_plain, cpu_plain = took, _cpu() - cpu
        target.unlink()

    def stored(attempt: int) -> None:
        nonlocal best_store, cpu_store
        store_dir = work / f"store-{attempt}"
        store = CheckpointStore(str(store_dir), MemoryKeyStore())
        store.create_job_key("bench")
        cpu = _cpu()
        took = store_write(store, "bench", data)[0]
        if took < best_store:
            best_store, cpu_store = took, _cpu() - cpu
        shutil.rmtree(store_dir)

    for attempt in range(3):
        first, second = (plain, stored) if attempt % 2 == 0 else (stored, plain)
        first(attempt)
        second(attempt)
    return best_plain, best_store, cpu_plain, cpu_store


def crypto_cpu(data: bytes) -> tuple[float, float]:
    """CPU seconds per GiB of the two stages that touch every byte: fingerprint and seal."""
    from portal.storage.chunking import DEFAULT_CHUNK_SIZE
    from portal.storage.crypto import JobKeys
    from portal.storage.format import CHUNK_OVERHEAD, seal_chunk_into

    keys = JobKeys("bench", os.urandom(32))
    view, step = memoryview(data)[: 256 * 2**20], DEFAULT_CHUNK_SIZE
    cpu = _cpu()
    for i in range(0, len(view), step):
        keys.fingerprint(view[i : i + step])
    fingerprint = (_cpu() - cpu) * 2**30 / len(view)
    out = memoryview(bytearray(step + CHUNK_OVERHEAD))
    cpu = _cpu()
    for i in range(0, len(view), step):
        seal_chunk_into(
            keys, checkpoint_id="c", index=i, plaintext=view[i : i + step], fingerprint=b"", out=out
        )
    return fingerprint, (_cpu() - cpu) * 2**30 / len(view)


def bench_s3(data: bytes, work: Path) -> tuple[float, float]:
    moto = emu.start_moto()
    try:
        import s3fs

        fs = s3fs.S3FileSystem(**moto.options, skip_instance_cache=True)
        local = work / "plain-s3.bin"
        local.write_bytes(data)
        start = time.perf_counter()
        fs.put_file(str(local), f"{moto.container}/plain/state.bin")
        plain = time.perf_counter() - start
        fs.rm_file(f"{moto.container}/plain/state.bin")
        local.unlink()
        store = CheckpointStore(
            f"s3://{moto.container}/store", MemoryKeyStore(), options=moto.options, parallelism=16
        )
        store.create_job_key("bench")
        stored = store_write(store, "bench", data)[0]
        return plain, stored
    finally:
        moto.stop()


def bench_incremental(data: bytes) -> list[tuple[str, float]]:
    size = len(data)
    one_percent = size // 100
    rng = random.Random(11)
    rows: list[tuple[str, float]] = []

    def second_upload(name: str, first: list[bytes], second: list[bytes]) -> None:
        store = CheckpointStore(f"memory://bench-{name}", MemoryKeyStore())
        store.create_job_key("bench")
        for parts in (first, second):
            with store.open_writer("bench") as writer:
                for part in parts:
                    if part == b"<cut>":
                        writer.cut()
                    else:
                        writer.write(part)
                writer.commit()
                uploaded = writer.progress().bytes_uploaded
        rows.append((name, uploaded / size))
        for key in store.backend.list(""):  # free the memory filesystem
            store.backend.delete(key)

    changed = bytearray(data)
    at = rng.randrange(0, size - one_percent)
    changed[at : at + one_percent] = rng.randbytes(one_percent)
    second_upload("1% changed in place, one region", [data], [bytes(changed)])

    changed = bytearray(data)
    region = one_percent // 16
    for _ in range(16):
        at = rng.randrange(0, size - region)
        changed[at : at + region] = rng.randbytes(region)
    second_upload("1% changed in place, 16 regions", [data], [bytes(changed)])
    del changed

    header = b"step=999;"
    second_upload(
        "header grows 1 byte, producer cut",
        [header, b"<cut>", data],
        [b"step=1000;", b"<cut>", data],
    )
    second_upload(
        "header grows 1 byte, no cut",
        [header + data[:1000], data[1000:]],
        [b"step=1000;" + data[:1000], data[1000:]],
    )
    return rows


def bench_independent(data: bytes, checkpoints: int = 16, every: int = 4) -> tuple[float, float]:
    """Bytes uploaded per checkpoint (share of the state) over a line of ``checkpoints``, 1% of
    the state changed in place before each: with a full copy every ``every``-th, and never."""
    size = len(data)
    one_percent = size // 100

    def line(independent_every: int) -> float:
        rng = random.Random(13)  # the same changes for both lines
        store = CheckpointStore(
            f"memory://bench-line-{independent_every}",
            MemoryKeyStore(),
            independent_every=independent_every,
        )
        store.create_job_key("bench")
        state = bytearray(data)
        total = 0
        for _ in range(checkpoints):
            at = rng.randrange(0, size - one_percent)
            state[at : at + one_percent] = rng.randbytes(one_percent)
            with store.open_writer("bench") as writer:
                writer.write(bytes(state))
                writer.commit()
                total += writer.progress().bytes_uploaded
        for key in store.backend.list(""):  # free the memory filesystem
            store.backend.delete(key)
        return total / checkpoints / size

    return line(every), line(checkpoints + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=512)
    parser.add_argument("--large", action="store_true", help="2 GB state (2048 MB)")
    parser.add_argument(
        "--s3-size-mb",
        type=int,
        default=None,
        help="state size for the S3 row (default: --size-mb)",
    )
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument(
        "--line-size-mb",
        type=int,
        default=64,
        help="state size for the independent restore points row (16 checkpoints are kept)",
    )
    args = parser.parse_args()
    size = (2048 if args.large else args.size_mb) * 2**20
    data = make_state(size)
    mb = 2**20
    print(f"portal-storage benchmark (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")

    def row(*cells: str) -> None:
        # Printed as soon as measured: a long run that fails later still reports what it had.
        widths = (44, 22, 22, 0)
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
        sys.stdout.flush()

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        work = Path(tmp)
        plain, stored, cpu_plain, cpu_store = bench_local(data, work)
        row(
            f"local disk write, {size // mb} MiB",
            f"{size / mb / plain:,.0f} MiB/s plain",
            f"{size / mb / stored:,.0f} MiB/s store",
            f"{plain / stored:.2f}x (>= 0.8x)",
        )
        gib = size / 2**30
        fingerprint, seal = crypto_cpu(data)
        row(
            "  CPU s per GiB (user+sys)",
            f"{cpu_plain / gib:.2f} plain",
            f"{cpu_store / gib:.2f} store",
            f"of which fingerprint {fingerprint:.2f}, encrypt {seal:.2f}",
        )
        if not args.skip_s3:
            s3_size = (args.s3_size_mb or size // mb) * mb
            s3_data = data[:s3_size]
            try:
                plain, stored = bench_s3(s3_data, work)
            except Exception as exc:  # the emulator gave up (moto, large uploads, a busy host)
                row(f"S3 emulator write, {s3_size // mb} MiB", "failed:", f"{exc!r}"[:200], "")
            else:
                row(
                    f"S3 emulator write, {s3_size // mb} MiB",
                    f"{s3_size / mb / plain:,.0f} MiB/s s3fs put",
                    f"{s3_size / mb / stored:,.0f} MiB/s store",
                    f"{plain / stored:.2f}x (>= 0.9x)",
                )
            del s3_data
    for name, fraction in bench_incremental(data):
        row(
            f"2nd checkpoint: {name}",
            "",
            f"{fraction * 100:.2f}% uploaded",
            "(<= 3%)" if "1%" in name else "",
        )
    line_size = min(size, args.line_size_mb * mb)
    with_copies, without = bench_independent(data[:line_size])
    row(
        f"16 checkpoints, 1% changed each, {line_size // mb} MiB",
        f"{without * 100:.1f}%/ckpt incremental",
        f"{with_copies * 100:.1f}%/ckpt every 4th full",
        f"+{(with_copies - without) * 100:.1f}% of the state per checkpoint (<= 25%)",
    )


if __name__ == "__main__":
    main()
