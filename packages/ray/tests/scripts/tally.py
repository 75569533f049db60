"""A job that prints a running total of seeded random numbers, slowly enough to get a notice."""
import os
import random
import sys
import time

seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 60
delay = float(os.environ.get("TALLY_DELAY", "0.05"))
rng = random.Random(seed)
total = 0
for step in range(steps):
    total += rng.randint(1, 100)
    print(f"step {step} total {total}", flush=True)
    time.sleep(delay)
print("final", total, flush=True)
