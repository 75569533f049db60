"""Holds a file for a while: a node's pause is deferred, then abandoned at its deadline."""
import os
import sys
import time

fh = open(os.__file__)  # outside the job's working directory: it cannot travel
print("holding", flush=True)
for i in range(int(sys.argv[1])):
    time.sleep(0.01)
fh.close()
fh = None
if sys.version_info >= (3, 12):
    off = all(sys.monitoring.get_events(t) == 0 for t in range(6))
else:
    off = sys.gettrace() is None
print("line events off:", off)
print("end")
