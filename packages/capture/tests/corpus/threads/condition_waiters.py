"""Two threads of the program's own that wait on conditions inside their own ``with`` blocks:
a prefetcher that calls ``cond.wait()`` while its list is empty (a hand-written producer and
consumer; an ``RLock``, the default, held once), and a ``Thread`` subclass that calls
``cond.wait_for(predicate)`` on a condition over a plain ``Lock``, the predicate a lambda over
a local of its own. The main thread hands each one step at a time and waits for the answer,
so a notify lost at a resume would hang the run; each thread keeps a count in a local of its
own frame, so a thread that came back fresh, or a step done twice, shows in the output."""

import sys
import threading
import time


class Prefetcher:
    """Squares each item put on its list, on its own thread, holding its condition's lock
    except while it waits."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.items: list[int | None] = []
        self.results: list[tuple[int, int]] = []
        self.thread = threading.Thread(target=self._work, name="prefetch", daemon=True)
        self.thread.start()

    def _work(self) -> None:
        done = 0
        with self.cond:
            while True:
                while not self.items:
                    self.cond.wait()
                item = self.items.pop(0)
                if item is None:
                    return
                done += 1
                self.results.append((done, item * item))
                self.cond.notify_all()


class Gate(threading.Thread):
    """Notes each new step it is shown, once the step differs from the last it saw."""

    def __init__(self) -> None:
        super().__init__(name="gate")
        self.cond = threading.Condition(threading.Lock())
        self.step = -1
        self.stopping = False
        self.seen: list[int] = []

    def run(self) -> None:
        count = 0
        last = -1
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.step != last or self.stopping)
                last = self.step
            if self.stopping:
                return
            count += 1
            self.seen.append(count * (last + 1))
            with self.cond:
                self.cond.notify_all()


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
prefetcher = Prefetcher()
gate = Gate()
gate.start()
for step in range(steps):
    with prefetcher.cond:
        prefetcher.items.append(step)
        prefetcher.cond.notify_all()
        prefetcher.cond.wait_for(lambda: len(prefetcher.results) > step)
    with gate.cond:
        gate.step = step
        gate.cond.notify_all()
        gate.cond.wait_for(lambda: len(gate.seen) > step)
    print("step", step, prefetcher.results[-1], gate.seen[-1], flush=True)
    time.sleep(0.03)
with prefetcher.cond:
    prefetcher.items.append(None)
    prefetcher.cond.notify_all()
prefetcher.thread.join()
with gate.cond:
    gate.stopping = True
    gate.cond.notify_all()
gate.join()
print("threads", prefetcher.thread.name, gate.name, prefetcher.thread.daemon, gate.daemon)
print("results", sum(r for _, r in prefetcher.results), "seen", sum(gate.seen))
