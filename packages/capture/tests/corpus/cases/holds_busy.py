"""Holds a file while it runs many short lines: a pending pause is tried at each of them."""
import os
import sys
import time

fh = open(os.__file__)  # outside the job's working directory: it cannot travel
print("holding", flush=True)
end = time.monotonic() + float(sys.argv[1])
n = 0
while time.monotonic() < end:
    n += 1
fh.close()
print("end")
