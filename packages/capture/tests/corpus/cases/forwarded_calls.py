"""Pauses itself inside functions reached through calls that C only forwards: a decorator's
wrapper calling ``func(self, *args, **kwargs)`` (torchbearer's and many libraries' shape: on 3.11
every ``f(*args)`` enters its callee through C), ``self.method(*args)`` (through C on 3.12 and
3.13 too), nested under a ``for`` loop and a ``with`` block whose values sit on the caller's
stack, and a ``try`` around the forwarded call that must still catch what the callee raises
after a resume. Paused twice, the second time in resumed frames (under Portal)."""

import contextlib
import functools
import os
import signal

from portal.runtime import rt

STOPS = {7, 23}
ticks = 0
log = []


def maybe_pause():
    global ticks
    ticks += 1
    print("tick", ticks, flush=True)
    if ticks in STOPS and rt.active:
        os.kill(os.getpid(), signal.SIGTERM)


def traced(func):
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        log.append(f"enter {func.__name__}")
        result = func(self, *args, **kwargs)
        log.append(f"leave {func.__name__}")
        return result

    return wrapper


@contextlib.contextmanager
def section(name):
    log.append(f"open {name}")
    yield name.upper()
    log.append(f"close {name}")


class Trainer:
    def __init__(self):
        self.seen = []

    @traced
    def fit(self, epochs, *, batches):
        total = 0
        for epoch in range(epochs):
            with section(f"epoch{epoch}") as tag:
                total += len(tag) * self.forward_all(*range(batches))
        return total

    def forward_all(self, *batches):
        acc = 0
        for b in batches:
            acc += self.step(b, scale=2)
        return acc

    @traced
    def step(self, batch, scale):
        maybe_pause()
        self.seen.append(batch)
        if batch == 3:
            try:
                self.fail(*[batch])
            except ValueError as err:
                log.append(f"caught {err}")
        return batch * scale

    def fail(self, batch):
        maybe_pause()
        raise ValueError(f"batch {batch}")


trainer = Trainer()
result = trainer.fit(4, batches=5)
print("result", result)
print("seen", trainer.seen)
print("log", len(log), log[:12], log[-6:])
print("ticks", ticks)
