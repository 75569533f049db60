"""numpy's legacy global RandomState (also through a kept bound method), a Generator and a
private RandomState (both carried by value with their state)."""
import time

import numpy as np

np.random.seed(7)
normal = np.random.normal
gen = np.random.default_rng(99)
own = np.random.RandomState(5)


def step():
    time.sleep(0.003)
    return np.random.rand() + normal() + np.random.standard_normal()


acc = 0.0
for i in range(100):
    acc += step() + gen.random() + own.standard_normal()
    if i % 10 == 0:
        print(i, repr(acc), np.random.randint(0, 1000, size=3).tolist(), repr(gen.normal()))
print("done", repr(acc), np.random.get_state()[2], gen.integers(1 << 40))
