"""Code of the user's modules runs while a checkpoint loads (restore order test).

Values of every shape whose rebuilding runs code of the user's own modules, which reads those
modules' globals: dict subclasses filled through their ``__setitem__`` (torchbearer's ``State``),
an Enum with a custom ``__new__`` subclassed by the enum in use (ignite's ``EventEnum``), a
``__setstate__`` and a ``__reduce__``, both in the package ``shop`` of the job's directory and in
the script itself. The script pauses itself (SIGTERM) inside ``run()`` at fixed steps; after
every step it prints what it sees, and checks that each function shares its module's namespace.
"""

import os
import signal
import sys
import types

import shop
from shop.engine import GLOBAL_STATE, STEPS, Engine
from shop.events import EventEnum, Events
from shop.state import DEFAULTS, EPOCH, LOSS, Meter, State, StateKey

from portal.runtime import rt

PAUSE_AT = {2, 5, 7}  # steps at which run() pauses


class Phase(EventEnum):
    """An enum of the script's own, on the package's EventEnum."""

    WARMUP = "warmup"
    MAIN = "main"


class Tally(dict):
    """The script's own dict subclass: its ``__setitem__`` reads a global defined below it."""

    def __setitem__(self, key, value):
        if not isinstance(key, ALLOWED):
            raise TypeError(f"bad key {key!r}")
        super(Tally, self).__setitem__(key, value)  # noqa: UP008 (names the global)


ALLOWED = (str, Phase)


def _rebuild_point(x, y):
    return Point(x, y)


class Point:
    """Pickles through a function of the script that names the class."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __reduce__(self):
        return (_rebuild_point, (self.x, self.y))

    def __repr__(self):
        return f"Point({self.x}, {self.y})"


def identity_problems():
    """Functions of the script and of ``shop`` whose globals are not their module's namespace."""
    bad = []
    for name in ["__main__"] + [n for n in sys.modules if n.startswith("shop")]:
        module = sys.modules[name]
        for attr, value in list(vars(module).items()):
            funcs = [value] if isinstance(value, types.FunctionType) else []
            if isinstance(value, type) and value.__module__ == name:
                funcs = [f for f in vars(value).values() if isinstance(f, types.FunctionType)]
            for func in funcs:
                if func.__globals__ is not sys.modules[func.__module__].__dict__:
                    bad.append(f"{name}.{attr}")
    return bad


shop.events.bind_engine()
engine = Engine()
seen = []
engine.on(Events.STEP, lambda e, n: seen.append(n))
engine.on(Events.STEP, (Events.STEP(every=3), lambda e, n: seen.append(-n)))
tally = Tally()
tally["steps"] = 0
tally[Phase.WARMUP] = 0
state = State()
state[EPOCH] = 0
state[LOSS] = 1.0
shop.state.CURRENT = state
path = [Point(0, 0)]
meter = Meter("s")


def run(n):
    phase = Phase.WARMUP if n < 3 else Phase.MAIN
    if rt.active and n in PAUSE_AT:
        os.kill(os.getpid(), signal.SIGTERM)  # pauses at a line below
    engine.step(n)
    tally["steps"] += 1
    tally[phase] = tally.get(phase, 0) + 1
    state[EPOCH] = n
    state[LOSS] = round(state[LOSS] * 0.9, 6)
    path.append(Point(n, n * n))
    meter.total += n * meter.scale
    return phase


for n in range(9):
    phase = run(n)
    print(
        n,
        phase.name,
        phase is Phase(phase.value),
        Events.STEP is Events("step"),
        type(Events.STEP).__mro__[1] is EventEnum,
        dict(tally),
        state[EPOCH],
        state[LOSS],
        type(state) is State and type(engine.state) is State and shop.state.CURRENT is state,
        all(isinstance(k, StateKey) for k in state),
        GLOBAL_STATE[STEPS],
        DEFAULTS[EPOCH],
        engine.state[EPOCH],
        engine.meter.scale,
        round(engine.meter.total, 6),
        meter.scale,
        seen[-3:],
        path[-1],
        shop.engine.Events is Events and shop.events.Engine is Engine,
        identity_problems() or "identity ok",
        flush=True,
    )
