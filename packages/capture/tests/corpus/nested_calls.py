"""Nested calls, recursion, a multi-line expression with pending operands, a module-level loop."""
import time


def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


def leaf(i):
    time.sleep(0.002)
    return i * i


def middle(i):
    a = leaf(i)
    b = leaf(i + 1)
    return (a
            + b
            + leaf(i + 2))


def outer(k):
    total = 0
    for i in range(k):
        total += middle(i)
        if i % 5 == 0:
            print("outer", i, total)
    return total


grand = 0
for round_ in range(6):
    grand += outer(12)
    grand += fib(10)
    print("round", round_, grand)
print("done", grand)

import corpus_helper  # noqa: E402

corpus_helper.check_globals()
