"""Prints a few steps: a pause anywhere (its first line included) resumes to the same output."""
import time

total = 0
for i in range(6):
    total += i * i
    print("step", i, total, flush=True)
    time.sleep(0.02)
print("done", total)
