import os
import signal
import time

from portal.runtime import rt

fh = open(os.__file__)  # outside the job's working directory: it cannot travel
if rt.active:
    os.kill(os.getpid(), signal.SIGTERM)
for i in range(5):
    print("holding", i)
    time.sleep(0.01)
fh.close()
fh = None
print("released")
print("after")
for i in range(40):
    time.sleep(0.005)
print("tail done")
