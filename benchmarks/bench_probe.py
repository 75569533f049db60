"""Benchmark of the checkpoint check's walk. Run: ``python benchmarks/bench_probe.py [--quick]``.

The check walks a program's live state exactly as a checkpoint would (the checkpoint's own
pickler, every reducer and namespace rule) and keeps no byte. This measures that walk for states
of 10^4, 10^5 and 10^6 objects (a global holding ``[i, float(i)]`` rows: three objects a row),
side by side in the same process with a peer: the standard library's C pickler writing the same
state to a sink that keeps nothing. Target (issue 8): 10^6 objects walked in <= 1 s.

Each figure is the best of a few rounds (the machine is shared); the ratio to the peer is the
number to compare across machines.
"""

from __future__ import annotations

import argparse
import gc
import pickle
import sys
import time

from portal.capture.probing import probe

state: object = None  # the program's state: a global, as a script would hold it


class NullSink:
    """Counts bytes and keeps none, as the check's own sink does."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes | memoryview) -> int:
        self.size += len(data)
        return len(data)


class Row:
    """A user-class instance: the pickler's Python-level hooks see each one."""

    def __init__(self, i: int) -> None:
        self.i = i
        self.x = float(i)


def rows_of_lists(objects: int) -> object:
    return [[i, float(i)] for i in range(objects // 3)]  # list, int, float


def rows_of_instances(objects: int) -> object:
    return [Row(i) for i in range(objects // 3)]  # instance, its __dict__, float


def best_of(rounds: int, fn: object) -> float:
    times = []
    for _ in range(rounds):
        gc.collect()
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times)


def walk() -> None:
    problems = probe()
    assert problems == [], problems


def peer() -> None:
    pickle.Pickler(NullSink(), protocol=5).dump(state)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, up to 10^5 objects")
    options = parser.parse_args()
    global state
    sizes = [10_000, 100_000] if options.quick else [10_000, 100_000, 1_000_000]
    rounds = 2 if options.quick else 3
    print(f"checkpoint check walk, Python {sys.version.split()[0]}, best of {rounds}")
    print(
        f"{'shape':>10} {'objects':>10} {'walk s':>9} {'ns/object':>10} {'pickle s':>9} "
        f"{'ratio':>7}"
    )
    worst = 0.0
    for shape, make in (("lists", rows_of_lists), ("instances", rows_of_instances)):
        for size in sizes:
            state = make(size)
            walked = best_of(rounds, walk)
            pickled = best_of(rounds, peer)
            if size == 1_000_000:
                worst = max(worst, walked)
            print(
                f"{shape:>10} {size:>10} {walked:>9.3f} {walked / size * 1e9:>10.0f} "
                f"{pickled:>9.3f} {walked / pickled:>6.1f}x"
            )
            state = None
    if not options.quick:
        verdict = "met" if worst <= 1.0 else "MISSED"
        print(f"target 10^6 objects <= 1 s: {verdict} (slowest shape {worst:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
