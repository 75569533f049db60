"""Classes of the program's modules with ``__slots__`` (one string or a sequence) come back with
the same slots, not a ``__dict__``, and can be carried again by a second pause (sqlparse's
``TokenList`` has ``__slots__ = 'tokens'``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from _harness import EXIT_PAUSED, plain_run, run_to_end

from portal.capture.pickler import dumps

MODULE = """
import abc
from typing import NamedTuple


class Point(NamedTuple):  # typing's metaclass refuses __slots__ in a class namespace
    x: int
    y: int = 0

    def norm(self):
        return abs(self.x) + abs(self.y)


class Shape(abc.ABC):
    __slots__ = ("name",)

    @abc.abstractmethod
    def area(self): ...


class Square(Shape):
    __slots__ = ["side"]

    def __init__(self, side):
        self.name, self.side = "square", side

    def area(self):
        return self.side * self.side


class Token:
    __slots__ = ("value", "parent")

    def __init__(self, value):
        self.value, self.parent = value, None


class TokenList(Token):
    __slots__ = "tokens"

    def __init__(self, tokens):
        super().__init__(None)
        self.tokens = tokens
        for token in tokens:
            token.parent = self
"""

SCRIPT = """
import os
import signal

from portal.runtime import rt

import toks

lists = []
points = [toks.Point(i, -i) for i in range(3)]
shapes = [toks.Square(i) for i in range(3)]
for i in range(30):
    lists.append(toks.TokenList([toks.Token(j) for j in range(i % 4)]))
    if i in (10, 20) and rt.active:
        os.kill(os.getpid(), signal.SIGTERM)
print(sum(len(tl.tokens) for tl in lists), toks.TokenList.__slots__, toks.Token.__slots__)
print([hasattr(tl, "__dict__") for tl in (lists[0], lists[15], lists[-1])])
print(all(type(tl) is toks.TokenList and tl.tokens[0].parent is tl for tl in lists if tl.tokens))
print(sorted(k for k in vars(toks.TokenList) if not k.startswith("__")))
print([p.norm() for p in points], points[1]._asdict(), type(points[0]) is toks.Point)
print([s.area() for s in shapes], [hasattr(s, "__dict__") for s in shapes], toks.Square(4).area())
"""


def test_slotted_classes_keep_their_slots_across_two_pauses(tmp_path: Path) -> None:
    (tmp_path / "toks.py").write_text(MODULE)
    script = tmp_path / "main.py"
    script.write_text(SCRIPT)
    codes, out, err = run_to_end(script, tmp_path / "main.portal", timeout=120)
    assert codes == [EXIT_PAUSED, EXIT_PAUSED, 0], err.decode()
    plain = plain_run(script)
    assert plain.returncode == 0, plain.stderr.decode()
    assert out == plain.stdout
    assert b"[False, False, False]" in out


def test_a_class_made_in_a_function_keeps_its_string_slot_in_another_process(
    tmp_path: Path,
) -> None:
    def make() -> type:
        class Local:
            __slots__ = "only"

        return Local

    obj = make()()
    obj.only = 5
    data, buffers, _ = dumps(obj, namespaces={})
    assert not buffers
    (tmp_path / "obj.pickle").write_bytes(data)
    check = (
        "import pickle, sys\n"
        "from portal.capture.pickler import dumps\n"
        "back = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "again, _, _ = dumps(type(back), namespaces={})\n"  # carried again
        "print(back.only, hasattr(back, '__dict__'), pickle.loads(again).__slots__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check, str(tmp_path / "obj.pickle")],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.split() == [b"5", b"False", b"only"]
