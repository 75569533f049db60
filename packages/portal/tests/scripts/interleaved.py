"""Lines on stdout and stderr in turn, slowly: `portal logs` replays them in this order."""
import sys
import time

for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 8):
    stream, name = (sys.stdout, "out") if i % 2 == 0 else (sys.stderr, "err")
    print(f"line {i} on {name}", file=stream, flush=True)
    time.sleep(0.3)
