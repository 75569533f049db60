"""A thread of the program's that polls a list at an interval, waiting on an event between
looks (the shape of a heartbeat or a directory watcher): at a pause it stands in
``stop.wait(0.02)`` (or runs its own lines for a moment), and its wait times out every 20 ms,
during a pause's pickle too. Its count of items handled is a local of its run method."""

import sys
import threading
import time


class Poller(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="poller", daemon=True)
        self.inbox: list[int | None] = []
        self.outbox: list[tuple[int, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        handled = 0
        while True:
            while self.inbox:
                item = self.inbox.pop(0)
                if item is None:
                    return
                handled += 1
                self.outbox.append((handled, item * item + handled))
            self.stop.wait(0.02)


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
poller = Poller()
poller.start()
for step in range(steps):
    poller.inbox.append(step)
    while len(poller.outbox) <= step:
        time.sleep(0.005)
    print("step", step, poller.outbox[-1], flush=True)
poller.inbox.append(None)
poller.join()
print("handled", len(poller.outbox), sum(v for _, v in poller.outbox))
