"""A clean job that runs until it is suspended (or for STEPS steps): every value can be carried."""
import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
total = 0
for step in range(steps):
    total += step
    print(f"step {step} total {total}", flush=True)
    time.sleep(0.02)
print("final", total)
