"""One long native call: the pause comes after it returns."""
import sys
import time

print("before", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0)
print("after sleep", flush=True)
for step in range(40):
    print("step", step, flush=True)
    time.sleep(0.05)
print("final")
