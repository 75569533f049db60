"""Holds an open file in a global for a while: a pause must wait until it is closed."""
import time

log = open("held.txt", "w")
for step in range(100):
    log.write(f"{step}\n")
    print("holding", step, flush=True)
    time.sleep(0.05)
log.close()
log = None
for step in range(100, 160):
    print("free", step, flush=True)
    time.sleep(0.05)
print("final")
