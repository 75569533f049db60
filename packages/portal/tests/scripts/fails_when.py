"""A job that fails in its own code the moment a flag file (outside its folder) exists: right
after a resume, when the flag is made while it is suspended."""
import os
import sys
import time

flag = sys.argv[1]
for step in range(200):
    print(f"step {step}", flush=True)
    time.sleep(0.05)
    if os.path.exists(flag):
        raise RuntimeError("boom from the resumed script")
print("final")
