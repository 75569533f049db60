"""A job whose state grows large partway (SIZE random bytes from step 10), so that saving and
uploading its checkpoint take a while."""
import random
import sys
import time

size = int(sys.argv[1]) if len(sys.argv) > 1 else 0
blob = b""
for step in range(300):
    if step == 10:
        blob = random.Random(1).randbytes(size)
    print(f"step {step}", flush=True)
    time.sleep(0.05)
print("final", len(blob), sum(blob[:1000]))
