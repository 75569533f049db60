"""How the test ranks end: only once no rank will use the store rank 0 hosts again (a rank that
calls it after rank 0's process ended is aborted by torch: "terminate called...")."""

import time


def leave_together(store, rank: int, world: int, key: str) -> None:
    store.add(f"{key}/done", 1)
    while int(store.add(f"{key}/done", 0)) < world:
        time.sleep(0.01)
    if rank != 0:
        store.add(f"{key}/left", 1)  # this rank's last call to the store
        return
    while int(store.add(f"{key}/left", 0)) < world - 1:
        time.sleep(0.01)
