"""Methods with super(), properties, a dataclass, __slots__, with blocks, try/except."""
import dataclasses
import time


class Base:
    def __init__(self, name):
        self.name = name
        self.log = []

    def step(self, i):
        time.sleep(0.002)
        self.log.append(i)
        return i


class Child(Base):
    def step(self, i):
        value = super().step(i) * 2
        time.sleep(0.001)
        return value + len(self.log)

    @property
    def size(self):
        return len(self.log)


@dataclasses.dataclass
class Point:
    x: int
    y: int

    def moved(self, dx):
        return Point(self.x + dx, self.y - dx)


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a = a
        self.b = b


class Tracker:
    def __init__(self):
        self.depth = 0
        self.entered = 0

    def __enter__(self):
        self.depth += 1
        self.entered += 1
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        return False


tracker = Tracker()


def run(c, p, s):
    out = []
    for i in range(20):
        with tracker as t:
            v = c.step(i)
            time.sleep(0.001)
            out.append(v + t.depth)
        try:
            if i % 7 == 3:
                raise ValueError(i)
            s.a += i
        except ValueError as exc:
            s.b += exc.args[0]
        p = p.moved(1)
    return out, p


child = Child("c")
point = Point(0, 0)
slotted = Slotted(0, 0)
for r in range(4):
    res, point = run(child, point, slotted)
    print(r, sum(res), child.size, point, slotted.a, slotted.b, tracker.entered, tracker.depth)
print("done", isinstance(child, Base), type(point).__name__)

import corpus_helper  # noqa: E402

corpus_helper.check_globals()
