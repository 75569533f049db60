"""A job that holds what owns threads and processes, written for the tests: a metrics writer of
its own (a worker thread draining a queue into a file) registered with
``portal.runtime.remake``, a ``QueueListener`` feeding a log file, a ``ThreadPoolExecutor`` and a
fork ``multiprocessing.Pool``, each used at every step. Paused and resumed anywhere, its output
and its files must be an uninterrupted run's."""

import concurrent.futures
import logging
import logging.handlers
import multiprocessing
import os
import queue
import sys
import threading
import time

import portal.runtime

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 40


class MetricsWriter:
    """Lines written by a worker thread, as a metrics logger does."""

    def __init__(self, path):
        self.path = path
        self.queue = queue.Queue()
        self.thread = threading.Thread(target=self._drain, name="metrics", daemon=True)
        self.thread.start()

    def _drain(self):
        while True:
            line = self.queue.get()
            with open(self.path, "a") as f:
                f.write(line + "\n")
            self.queue.task_done()

    def log(self, **values):
        self.queue.put(" ".join(f"{k}={v!r}" for k, v in values.items()))

    def flush(self):
        self.queue.join()


def cube(x):
    return x * x * x


def digest(values):
    return sum((i + 1) * v for i, v in enumerate(values)) % 1_000_003


metrics = portal.runtime.remake(
    MetricsWriter("metrics.txt"), MetricsWriter, "metrics.txt", quiesce=MetricsWriter.flush
)
records = queue.Queue()
file_handler = logging.FileHandler("events.log")
file_handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
listener = logging.handlers.QueueListener(records, file_handler)
listener.start()
log = logging.getLogger("job")
log.addHandler(logging.handlers.QueueHandler(records))
log.setLevel(logging.INFO)
log.propagate = False

threads = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="io")
processes = multiprocessing.get_context("fork").Pool(2)

total = 0
for step in range(STEPS):
    cubes = processes.map(cube, range(step, step + 8))
    total = (total + threads.submit(digest, cubes).result()) % 1_000_003
    metrics.log(step=step, total=total)
    log.info("step %d total %d", step, total)
    print(f"step {step} total {total}", flush=True)
    time.sleep(float(os.environ.get("STEP_SLEEP", "0.02")))

metrics.flush()
listener.stop()
threads.shutdown()
processes.close()
processes.join()
print("done", total, flush=True)
