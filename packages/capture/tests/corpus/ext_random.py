"""random's hidden global generator: at module level, in functions, through a kept bound method,
with gauss()'s cached second value."""
import random
import time
from random import random as draw

random.seed(1234)


def step(i):
    time.sleep(0.003)
    return random.random() + random.randint(0, 9) + draw()


total = 0.0
for i in range(100):
    x = random.random()
    total += step(i) + x
    if i % 10 == 0:
        print(i, repr(x), repr(total), repr(random.gauss(0, 1)))
print("done", repr(total), random.getrandbits(64))
