"""Child process for the crash tests: writes one checkpoint, to be killed at any moment.

argv: STORE_URL KEY_HOME SEED [kill-in-manifest]
Prints "ready" once the writer is open, "committed CKPT" after commit.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time

from portal.storage import CheckpointStore, FileKeyStore

CHUNK = 32 * 1024
PACK = 4 * CHUNK
SIZE = 4 * 2**20


def state(seed: int) -> bytes:
    return random.Random(seed).randbytes(SIZE)


def main() -> None:
    url, home, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = CheckpointStore(
        url, FileKeyStore(home), chunk_size=CHUNK, pack_size=PACK, parallelism=2
    )
    if len(sys.argv) > 4:  # die halfway through writing the manifest's temporary file
        real_write = os.write

        def dying_write(fd: int, data: bytes) -> int:
            if os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1].startswith(".manifest"):
                real_write(fd, bytes(memoryview(data)[: len(data) // 2]))
                os.kill(os.getpid(), signal.SIGKILL)
            return real_write(fd, data)

        os.write = dying_write  # type: ignore[assignment]
    # A steady pace (about 10 ms a pack, like a slow disk or link) so that kills land mid-upload.
    backend = store.backend
    real_put = backend.write_bytes_deferred  # type: ignore[union-attr]

    def paced_put(key: str, data: bytes | bytearray | memoryview) -> None:
        time.sleep(0.01)
        real_put(key, data)

    backend.write_bytes_deferred = paced_put  # type: ignore[union-attr]
    data = state(seed)
    writer = store.open_writer("crash-job", expected_bytes=len(data))
    print("ready", flush=True)
    for i in range(0, len(data), 100_000):
        writer.write(data[i : i + 100_000])
    ref = writer.commit()
    print("committed", ref.checkpoint_id, flush=True)


if __name__ == "__main__":
    main()
