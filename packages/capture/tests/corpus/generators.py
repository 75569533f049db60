"""Generators of the script partway through at every safe point: a training loop fed by a
generator function, ``yield from``, a generator kept in an object, ``send``, ``with`` and
``try/finally`` around ``yield``, closures, generators not started yet and finished ones."""

import time

import corpus_helper


def batches(data, size):
    for start in range(0, len(data), size):
        time.sleep(0.002)
        yield data[start : start + size]


def epochs(data, size, n):
    for epoch in range(n):
        got = yield from batches(data, size)
        yield ("end of epoch", epoch, got)


class Log:
    def __init__(self):
        self.lines = []

    def __enter__(self):
        self.lines.append("enter")
        return self

    def __exit__(self, *exc):
        self.lines.append("exit")
        return False


def logged(n, log):
    with log:
        try:
            for i in range(n):
                yield i
        finally:
            log.lines.append("finally")


def averager():
    total, count = 0.0, 0
    average = None
    while True:
        value = yield average
        total += value
        count += 1
        average = total / count


def counter_pair():
    count = 0

    def tick():
        nonlocal count
        while True:
            count += 1
            yield count

    return tick(), lambda: count


class Feeder:
    def __init__(self, data):
        self.stream = batches(data, 3)
        self.seen = 0

    def next_batch(self):
        self.seen += 1
        return next(self.stream, None)


data = list(range(40))
acc = corpus_helper.Accumulator(0)
avg = averager()
next(avg)
ticks, ticked = counter_pair()
later = batches(data, 5)  # not started until the end
finished = batches([], 1)
list(finished)
feeder = Feeder(data)
log = Log()
for step, item in enumerate(epochs(data, 4, 3)):
    if isinstance(item, tuple):
        print(step, item)
        continue
    acc.add(sum(item))
    mean = avg.send(sum(item))
    next(ticks)
    b = feeder.next_batch()
    print(step, item, round(mean, 3), ticked(), b, flush=True)
    time.sleep(0.02)
for i in logged(6, log):
    print("logged", i, log.lines)
    time.sleep(0.02)
print("later", list(later), list(finished), acc.value, log.lines)

import corpus_helper  # noqa: E402

corpus_helper.check_globals()
