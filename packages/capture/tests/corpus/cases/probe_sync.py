import json
import threading

from portal.capture import probe

ready = threading.Event()


class Worker:
    def __init__(self):
        self.lock = threading.Lock()
        self.take = self.lock.acquire  # the same lock again, through a bound method


def check():
    cond = threading.Condition()
    worker = Worker()
    return probe()


print(json.dumps(sorted([p.name, p.type_name, p.reason] for p in check())))
