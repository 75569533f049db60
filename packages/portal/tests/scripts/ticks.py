"""A short clean job: every value it keeps can be carried."""
import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
history = []
for step in range(steps):
    history.append(step * step)
    print(f"tick {step} sum {sum(history)}", flush=True)
    time.sleep(0.03)
print("final", len(history))
