import os
import signal
import threading
import time

from portal.runtime import rt

lock = threading.Lock()


def work():
    with lock:
        if rt.active:
            os.kill(os.getpid(), signal.SIGTERM)
        for i in range(4):
            print("inside", i)
            time.sleep(0.01)
    print("released")
    return "ok"


print(work())
print("end")
for _ in range(40):
    time.sleep(0.005)
print("tail done", lock.locked())
