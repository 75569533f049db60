import collections, dataclasses, enum, functools, os, signal, typing
from portal.runtime import rt

class Color(enum.Enum):
    RED = 1
    BLUE = 2

@dataclasses.dataclass(frozen=True)
class Frozen:
    a: int
    b: tuple = ()

Pair = collections.namedtuple("Pair", "x y")

class TP(typing.NamedTuple):
    name: str
    n: int = 0

class Base:
    __slots__ = ("v",)
    def __init__(self, v): self.v = v
    @classmethod
    def make(cls, v): return cls(v)
    @staticmethod
    def twice(v): return 2 * v
    @property
    def double(self): return self.twice(self.v)

class Sub(Base):
    __slots__ = ("w",)
    def __init__(self, v, w):
        super().__init__(v)
        self.w = w

counts = collections.defaultdict(lambda: [0])
counts["a"][0] += 1
items = [Color.RED, Frozen(1, (2, 3)), Pair(1, 2), TP("t", 3), Sub(4, 5), Base.make(7)]
cache = functools.lru_cache(maxsize=None)(lambda k: k * 3)
cache(2)


@functools.lru_cache(maxsize=None)
def fibm(n):
    return n if n < 2 else fibm(n - 1) + fibm(n - 2)


fibm(20)
if rt.active:
    os.kill(os.getpid(), signal.SIGTERM)
counts["b"][0] += 5
print(items[0] is Color.RED, Color(2), items[1], items[2], items[3], items[4].double, items[4].w, items[5].double)
print(dict(counts), cache(2), isinstance(items[4], Base), type(items[5]).__name__)
print(fibm(30), fibm.__name__)
print(Frozen(1, (2, 3)) == items[1], hash(items[1]) == hash(Frozen(1, (2, 3))))
