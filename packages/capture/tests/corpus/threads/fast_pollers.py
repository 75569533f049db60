"""Threads of the program's own that wake far more often than a pause takes to pickle the
program's state: each waits 2 ms at a time, in an event's ``wait(seconds)``, a queue's
``get(timeout=...)``, a condition's ``wait(seconds)`` in its own ``with cond:``, and a
semaphore's ``acquire(timeout=...)``; a fifth drains a queue with ``for item in iter(q.get,
None)``, the idiom of many worker loops. The state (a few hundred thousand records) takes far
longer than 2 ms to pickle, so every wait times out while a pause is being taken. Each thread
keeps its count in a local of its own frame and in an attribute: a thread that came back
fresh, or was lost, shows in the output."""

import queue
import sys
import threading
import time


class Record:
    def __init__(self, i: int) -> None:
        self.i = i
        self.name = f"record-{i}"
        self.tags = (i % 7, i % 11)


class Pollers:
    """Four pollers that each square the items put in their inbox, and a queue drainer."""

    def __init__(self) -> None:
        self.inboxes: list[list[int | None]] = [[] for _ in range(5)]
        self.outboxes: list[list[tuple[int, int]]] = [[] for _ in range(6)]
        self.stop = threading.Event()
        self.polled: queue.Queue[int] = queue.Queue()
        self.cond = threading.Condition(threading.Lock())
        self.sem = threading.Semaphore(0)
        self.work: queue.Queue[int | None] = queue.Queue()
        self.threads = [
            threading.Thread(target=self._by_event, name="by-event", daemon=True),
            threading.Thread(target=self._by_queue, name="by-queue", daemon=True),
            threading.Thread(target=self._by_condition, name="by-condition", daemon=True),
            threading.Thread(target=self._by_semaphore, name="by-semaphore", daemon=True),
            threading.Thread(target=self._drain, name="drainer", daemon=True),
            threading.Thread(target=self._by_sleep, name="by-sleep", daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _answer(self, which: int, handled: int) -> bool:
        inbox = self.inboxes[which]
        while inbox:
            item = inbox.pop(0)
            if item is None:
                return False
            handled += 1
            self.outboxes[which + (which == 4)].append((handled, item * item + handled))
        return True

    def _by_event(self) -> None:
        while self._answer(0, len(self.outboxes[0])):
            self.stop.wait(0.002)

    def _by_queue(self) -> None:
        while self._answer(1, len(self.outboxes[1])):
            try:
                self.polled.get(timeout=0.002)
            except queue.Empty:
                pass

    def _by_condition(self) -> None:
        while self._answer(2, len(self.outboxes[2])):
            with self.cond:
                self.cond.wait(0.002)

    def _by_semaphore(self) -> None:
        while self._answer(3, len(self.outboxes[3])):
            self.sem.acquire(timeout=0.002)

    def _drain(self) -> None:
        handled = 0
        for item in iter(self.work.get, None):
            handled += 1
            self.outboxes[4].append((handled, item * 3 + handled))

    def _by_sleep(self) -> None:
        while self._answer(4, len(self.outboxes[5])):
            time.sleep(0.002)


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
records = [Record(i) for i in range(300_000)]
pollers = Pollers()
for step in range(steps):
    for inbox in pollers.inboxes:
        inbox.append(step)
    pollers.work.put(step)
    while any(len(out) <= step for out in pollers.outboxes):
        time.sleep(0.005)
    records[step].name += "!"
    print("step", step, [out[-1] for out in pollers.outboxes], flush=True)
    time.sleep(0.02)
for inbox in pollers.inboxes:
    inbox.append(None)
pollers.work.put(None)
for thread in pollers.threads:
    thread.join()
print("handled", [len(out) for out in pollers.outboxes], sum(r.tags[0] for r in records))
print("renamed", sum(r.name.endswith("!") for r in records))
