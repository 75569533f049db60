"""Recursion 16 frames deep, mutual recursion, a closure over a shared counter."""
import time


def make_counter():
    count = 0

    def bump():
        nonlocal count
        count += 1
        return count

    def read():
        return count

    return bump, read


bump, read = make_counter()


def descend(depth, path):
    bump()
    if depth == 0:
        time.sleep(0.004)
        return len(path)
    path = path + [depth]
    below = descend(depth - 1, path)
    time.sleep(0.0005)
    return below + depth


def is_even(n):
    return True if n == 0 else is_odd(n - 1)


def is_odd(n):
    time.sleep(0.0002)
    return False if n == 0 else is_even(n - 1)


results = []
for r in range(12):
    results.append(descend(16, []))
    results.append(is_even(r + 10))
    print(r, results[-2:], read())
print("done", sum(x for x in results if not isinstance(x, bool)), read())

import corpus_helper  # noqa: E402

corpus_helper.check_globals()
