"""An engine keyed by ``Events`` members, with a module-level ``State`` of its own: its values
need the globals of ``shop.state`` and ``shop.events``."""

from shop.events import Events
from shop.state import EPOCH, Meter, State, key

STEPS = key("steps")
GLOBAL_STATE = State()
GLOBAL_STATE[STEPS] = 0


class Engine:
    def __init__(self):
        self.handlers = {}
        self.state = State()
        self.state[EPOCH] = 0
        self.meter = Meter("ms")

    def on(self, event, handler):
        self.handlers.setdefault(event, []).append(handler)

    def fire(self, event, n):
        for handler in self.handlers.get(event, []):
            if not isinstance(handler, tuple) or handler[0].fires(n):
                (handler[1] if isinstance(handler, tuple) else handler)(self, n)

    def step(self, n):
        GLOBAL_STATE[STEPS] += 1
        self.state[EPOCH] = n
        self.meter.total += n * self.meter.scale
        self.fire(Events.STEP, n)
