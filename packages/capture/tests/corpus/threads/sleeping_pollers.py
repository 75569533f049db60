"""Threads of the program's own that spend their lives in ``time.sleep``: a poller that looks at
a list every 50 ms and answers each item (the shape of a directory watcher, or of a loop that
logs GPU use), and a heartbeat that sleeps a quarter of a second between beats. Each keeps its
count in a local of its own frame and in an attribute: a thread that came back fresh, or one
that was lost, shows in the output."""

import sys
import threading
import time


class Poller:
    """Squares each item put on its inbox, looking every 50 ms."""

    def __init__(self) -> None:
        self.inbox: list[int | None] = []
        self.outbox: list[tuple[int, int]] = []
        self.thread = threading.Thread(target=self._poll, name="poller", daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        handled = 0
        while True:
            while self.inbox:
                item = self.inbox.pop(0)
                if item is None:
                    return
                handled += 1
                self.outbox.append((handled, item * item + handled))
            time.sleep(0.05)


class Heartbeat(threading.Thread):
    """Beats every quarter second until it is stopped; its beats counted twice."""

    def __init__(self) -> None:
        super().__init__(name="heartbeat")
        self.beats = 0
        self.stopping = False
        self.agreed: bool | None = None

    def run(self) -> None:
        beats = 0
        while not self.stopping:
            time.sleep(0.25)
            beats += 1
            self.beats += 1
        self.agreed = beats == self.beats


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
poller = Poller()
heart = Heartbeat()
heart.start()
for step in range(steps):
    poller.inbox.append(step)
    while len(poller.outbox) <= step:
        time.sleep(0.005)
    print("step", step, poller.outbox[-1], flush=True)
    time.sleep(0.02)
poller.inbox.append(None)
poller.thread.join()
heart.stopping = True
heart.join()
print("handled", len(poller.outbox), sum(v for _, v in poller.outbox))
print("heartbeat", heart.name, heart.daemon, heart.agreed, heart.beats > 0)
