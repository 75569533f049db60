"""A worker thread of the program's that is busy running its own lines when the pause is asked
for (it pauses itself under Portal): the pause waits until the worker parks in its queue's
get again, then carries it there."""

import os
import queue
import select
import signal
import threading
import time

from portal.runtime import rt


class Cruncher:
    def __init__(self) -> None:
        self.jobs: queue.Queue = queue.Queue()
        self.results: list[int] = []
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._work, name="cruncher", daemon=True)
        self.thread.start()

    def _work(self) -> None:
        while (n := self.jobs.get()) is not None:
            total = 0
            self.started.set()
            for i in range(n):  # its own lines, for a while: no pause can read this thread
                total = (total * 31 + i) % 1_000_003
                select.select([], [], [], 0.01)  # a wait no pause reads (lets main run on)
            self.results.append(total)
            self.jobs.task_done()
        self.jobs.task_done()


cruncher = Cruncher()
cruncher.jobs.put(60)
cruncher.started.wait()
if rt.active:
    os.kill(os.getpid(), signal.SIGTERM)
while not cruncher.results:
    time.sleep(0.01)
print("crunched", cruncher.results)
cruncher.jobs.put(10)
cruncher.jobs.join()
print("results", cruncher.results)
cruncher.jobs.put(None)
cruncher.thread.join()
print("end")
