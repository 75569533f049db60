"""lru_cache / functools.cache wrappers of the script's own functions, and of a builtin and of a
compiled pattern's bound method (mpmath's and pycodestyle's shapes), used in a module-level loop:
after a pause their contents, LRU order and statistics must be as if it never happened."""
import dataclasses
import functools
import itertools
import math
import re
import time

calls = {"square": 0, "pair": 0, "norm": 0, "typed": 0}


@functools.lru_cache(maxsize=5)
def square(n):
    calls["square"] += 1
    return n * n


@functools.cache
def pair(a, b=0, *, scale=1):
    calls["pair"] += 1
    return (a + b) * scale


@functools.lru_cache(maxsize=4, typed=True)
def typed(x):
    calls["typed"] += 1
    return repr(x)


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int

    @functools.lru_cache(maxsize=3)
    def norm(self):
        calls["norm"] += 1
        return abs(self.x) + abs(self.y)


fact = functools.lru_cache(maxsize=3)(math.factorial)
squeeze = functools.lru_cache(maxsize=6)(re.compile(r"\s+").sub)

keys = itertools.cycle([1, 2, 3, 4, 5, 6, 2, 3, 1, 7])
tick = itertools.count(100, 3)
total = 0
for step in range(60):
    k = next(keys)
    total += square(k) + pair(k % 3, b=k % 2, scale=2) + len(typed(k if step % 2 else float(k)))
    total += Point(k % 4, -(k % 3)).norm()
    total += fact(k) % 97 + len(squeeze(" ", "a" + " " * k + "b"))
    if step % 10 == 9:
        print(step, next(tick), total, square.cache_info(), flush=True)
    time.sleep(0.012)

print("calls", calls)
print("square", square.cache_info(), square.cache_parameters())
print("pair", pair.cache_info(), pair.cache_parameters())
print("typed", typed.cache_info(), typed.cache_parameters())
print("norm", Point.norm.cache_info())
print("fact", fact.cache_info(), "squeeze", squeeze.cache_info())
print("total", total, next(tick))
