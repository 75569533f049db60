"""A job that prints a running total, slowly enough to get a notice partway."""
import random
import sys
import time

rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
total = 0
for step in range(100):
    total += rng.randint(1, 100)
    print(f"step {step} total {total}", flush=True)
    if step % 10 == 0:
        print(f"checkpoint-ish {step}", file=sys.stderr, flush=True)
    time.sleep(0.08)
print("final", total)
