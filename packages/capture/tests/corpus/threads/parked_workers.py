"""Two threads of the program's own that spend their lives parked in a wait of the standard
library's: a class with a worker draining a queue (the shape of a metrics writer), and a
``Thread`` subclass that waits on an event for each step. Each keeps a count in a local
variable of its own frame, so a thread that came back fresh, or a step done twice, shows in
the output."""

import queue
import threading
import time
import sys


class Totals:
    """Sums each batch put on its queue, on its own thread."""

    def __init__(self) -> None:
        self.queue: queue.Queue = queue.Queue()
        self.sums: list[tuple[int, int]] = []
        self.thread = threading.Thread(target=self._drain, name="totals", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        seen = 0
        while True:
            batch = self.queue.get()
            if batch is None:
                self.queue.task_done()
                return
            seen += 1
            self.sums.append((seen, sum(batch)))
            self.queue.task_done()


class Ticker(threading.Thread):
    """Counts the steps it is told of, in a local of its run method."""

    def __init__(self) -> None:
        super().__init__(name="ticker")
        self.go = threading.Event()
        self.done = threading.Event()
        self.ticks: list[int] = []
        self.stopping = False

    def run(self) -> None:
        count = 0
        while True:
            self.go.wait()
            self.go.clear()
            if self.stopping:
                return
            count += 1
            self.ticks.append(count * count)
            self.done.set()


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
totals = Totals()
ticker = Ticker()
ticker.start()
for step in range(steps):
    batch = [(step * 7 + i) % 11 for i in range(step + 3)]
    totals.queue.put(batch)
    totals.queue.join()
    ticker.go.set()
    ticker.done.wait()
    ticker.done.clear()
    print("step", step, totals.sums[-1], ticker.ticks[-1], flush=True)
    time.sleep(0.03)
totals.queue.put(None)
totals.thread.join()
ticker.stopping = True
ticker.go.set()
ticker.join()
print("threads", totals.thread.name, ticker.name, totals.thread.daemon, ticker.daemon)
print("sums", sum(s for _, s in totals.sums), "ticks", sum(ticker.ticks))
