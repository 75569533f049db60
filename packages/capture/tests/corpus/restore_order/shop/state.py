"""torchbearer's ``State`` shape: a dict subclass that fills through its own ``__setitem__``,
which reads globals of this module (the class itself, a helper function, a key registry).

Unpickling a ``State`` runs that ``__setitem__`` for every item, so this module's namespace must
be back before any ``State`` is rebuilt.
"""

import warnings

_KEYS = []  # every key name made so far, in order (a registry the keys append to)
#: The State in use, set by the program: first in this namespace, so loaded before the class
#: and function its ``__setitem__`` names unless definitions load first.
CURRENT = None


class StateKey:
    """A key of ``State``; equal to its name, so a string still finds it."""

    def __init__(self, name):
        self.name = name
        _KEYS.append(name)

    def __eq__(self, other):
        return self.name == str(other)

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return self.name


class State(dict):
    def __setitem__(self, key, value):
        super(State, self).__setitem__(_checked(key), value)  # noqa: UP008 (names the global)

    def __getitem__(self, key):
        return super(State, self).__getitem__(_checked(key))  # noqa: UP008


def _checked(key):
    if not isinstance(key, StateKey):
        warnings.warn(f"State was accessed with a string: {key}", stacklevel=3)
    return key


def key(name):
    return StateKey(name)


UNITS = {"s": 1.0, "ms": 0.001}


class Meter:
    """An object whose ``__setstate__`` reads a plain module global (a dict defined after it)."""

    def __init__(self, unit):
        self.unit = unit
        self.scale = UNITS[unit]
        self.total = 0.0

    def __getstate__(self):
        return {"unit": self.unit, "total": self.total}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.scale = UNITS[state["unit"]]


EPOCH = key("epoch")
LOSS = key("loss")
#: A module-level State: rebuilt while this module's own namespace is being loaded.
DEFAULTS = State()
DEFAULTS[EPOCH] = 0
DEFAULTS[LOSS] = None
