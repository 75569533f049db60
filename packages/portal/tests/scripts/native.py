"""One long native call: the pause comes after it returns."""
import time

print("before", flush=True)
time.sleep(2.0)
print("after sleep", flush=True)
for step in range(40):
    print("step", step, flush=True)
    time.sleep(0.05)
print("final")
