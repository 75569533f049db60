"""Comprehensions, a generator in a for loop, del'd locals, lambdas."""
import time


def slow(x):
    time.sleep(0.002)
    return x * 3


def gen(n):
    for i in range(n):
        time.sleep(0.001)
        yield i * i


def work(r):
    squares = [slow(i) for i in range(8)]
    table = {i: slow(i) for i in range(5)}
    unique = {slow(i) % 4 for i in range(5)}
    tmp = sum(squares)
    del tmp
    total = 0
    for value in gen(10):
        total += value
    key = lambda v: -v  # noqa: E731
    ordered = sorted(squares, key=key)
    try:
        print(tmp)  # noqa: F821
    except UnboundLocalError:
        pass
    return squares, table, unique, total, ordered[:2]


for r in range(5):
    print(r, work(r))
print("done")

import corpus_helper  # noqa: E402

corpus_helper.check_globals()
