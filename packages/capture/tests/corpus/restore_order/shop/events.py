"""ignite's ``EventEnum`` shape: an Enum whose ``__new__`` names a module global (its other
base), subclassed by the enum the program uses. Rebuilding ``Events`` creates its members, which
calls ``EventEnum.__new__``, so ``CallableEventWithFilter`` must be in this module's namespace by
then (whichever module's namespace reached ``Events`` first)."""

from enum import Enum

Engine = None  # shop.engine.Engine, once bind_engine() has run


class CallableEventWithFilter:
    def __init__(self, value, every=None):
        self._value_ = value
        self.every = every

    def __call__(self, every):
        return CallableEventWithFilter(self._value_, every)

    def fires(self, n):
        return self.every is None or n % self.every == 0


class EventEnum(CallableEventWithFilter, Enum):
    def __new__(cls, value):
        obj = CallableEventWithFilter.__new__(cls)
        obj._value_ = value
        return obj


class Events(EventEnum):
    STARTED = "started"
    STEP = "step"
    COMPLETED = "completed"


def bind_engine():
    """Imports ``Engine`` late (``shop.engine`` imports this module), to break the cycle."""
    global Engine
    from shop.engine import Engine
