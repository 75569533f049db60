"""A script that imports a user module from its directory and keeps its objects."""
import time

import corpus_helper
from corpus_helper import Accumulator, make_scaler

acc = Accumulator(10)
double = make_scaler(2)


def drive(n):
    for i in range(n):
        acc.add(double(i))
        time.sleep(0.001)
    return acc.value


for r in range(6):
    value = drive(15)
    print(r, value, corpus_helper.counter, len(corpus_helper.history), isinstance(acc, corpus_helper.Accumulator))
print("done", corpus_helper.history[-3:], corpus_helper.Accumulator is Accumulator)

import corpus_helper  # noqa: E402

corpus_helper.check_globals()
