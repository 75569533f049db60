"""Closures sharing cells, decorators, functools.partial of user functions, module-level state."""
import functools
import time


def memo(fn):
    cache = {}

    @functools.wraps(fn)
    def wrapper(n):
        if n not in cache:
            cache[n] = fn(n)
        return cache[n]

    wrapper.cache = cache
    return wrapper


@memo
def tri(n):
    time.sleep(0.001)
    return n if n < 1 else n + tri(n - 1)


def pair():
    shared = []

    def push(x):
        shared.append(x)
        return len(shared)

    def peek():
        return shared[-1] if shared else None

    return push, peek


push, peek = pair()
add3 = functools.partial(lambda a, b: a + b, 3)
state = {"n": 0}

i = 0
while i < 60:
    state["n"] += push(add3(i))
    if i % 10 == 0:
        print(i, peek(), state["n"], tri(i // 2), len(tri.cache))
    time.sleep(0.004)
    i += 1
print("done", state, peek(), push.__closure__[0].cell_contents is peek.__closure__[0].cell_contents)

import corpus_helper  # noqa: E402

corpus_helper.check_globals()
