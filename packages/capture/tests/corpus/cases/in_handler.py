import os
import signal
import time

from portal.runtime import rt

try:
    raise ValueError("boom")
except ValueError as exc:
    if rt.active:
        os.kill(os.getpid(), signal.SIGTERM)
    for i in range(3):
        print("handling", exc, i)
print("handled")
print("end")
for i in range(40):
    time.sleep(0.005)
print("tail done")
