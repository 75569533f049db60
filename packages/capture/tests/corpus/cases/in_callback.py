import os
import signal
import time

from portal.runtime import rt

calls = []


def key(v):
    if not calls and rt.active:
        os.kill(os.getpid(), signal.SIGTERM)
    calls.append(v)
    return -v


ordered = sorted(range(30), key=key)
print("sorted", ordered[:5], len(calls))
print("end")
for i in range(40):
    time.sleep(0.005)
print("tail done")
