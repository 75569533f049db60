"""A small training job: fit y = 3x + 2 by stochastic gradient descent, one epoch at a time.

Plain Python on purpose: nothing in it knows about Portal. Its state (the weights, the RNG, the
loop position, the history) is what a checkpoint must carry.

    python train.py [EPOCHS]      # 80 epochs (about 7 s) unless told
"""

import random
import sys
import time

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 80

rng = random.Random(42)
data = [(x, 3.0 * x + 2.0 + rng.gauss(0, 0.1)) for x in (rng.uniform(-1, 1) for _ in range(256))]
w, b, lr = 0.0, 0.0, 0.05
history = []


def epoch(w, b):
    rng.shuffle(data)
    total = 0.0
    for x, y in data:
        err = (w * x + b) - y
        w -= lr * err * x
        b -= lr * err
        total += err * err
    return w, b, total / len(data)


for n in range(1, epochs + 1):
    w, b, loss = epoch(w, b)
    history.append(loss)
    print(f"epoch {n:3d}  loss {loss:.6f}  w {w:.4f}  b {b:.4f}", flush=True)
    time.sleep(0.08)  # stands in for real work per epoch

print(f"done: w={w:.6f} b={b:.6f} best loss {min(history):.6f}")
