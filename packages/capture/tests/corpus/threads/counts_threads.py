"""Prints the threads it sees, first and last: under Portal, as in a plain run, only its own
(the runtime's control thread is no ``threading.Thread``)."""

import threading
import time


def names() -> list[str]:
    return [t.name for t in threading.enumerate()]


print("threads", threading.active_count(), names(), flush=True)
for step in range(20):
    print("step", step, flush=True)
    time.sleep(0.02)
print("threads", threading.active_count(), names())
