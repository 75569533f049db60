import json
import threading
import time

from portal.capture import probe

ready = threading.Event()
# Another thread waits on the event: its condition holds that thread's (held) waiter lock.
threading.Thread(target=ready.wait, daemon=True).start()
while not ready._cond._waiters:
    time.sleep(0.005)


class Worker:
    def __init__(self):
        self.lock = threading.Lock()
        self.lock.acquire()  # held (an unlocked lock would travel)
        self.take = self.lock.acquire  # the same lock again, through a bound method


def check():
    cond = threading.Condition()
    cond.acquire()  # held by this thread
    worker = Worker()  # noqa: F841
    return probe()


print(json.dumps(sorted([p.name, p.type_name, p.reason] for p in check())))
