import calendar
import os
import signal
import time

from portal.runtime import rt

walker = calendar.Calendar().itermonthdates(2024, 1)
next(walker)
if rt.active:
    os.kill(os.getpid(), signal.SIGTERM)
for i in range(5):
    print("holding", i)
    time.sleep(0.01)
walker = None
print("released")
print("after")
for i in range(40):
    time.sleep(0.005)
print("tail done")
