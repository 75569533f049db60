"""Dicts and lists with shared references that must stay shared after a resume."""
import time

shared = [0]
registry = {"a": shared, "b": shared, "nested": {"deep": [shared, shared]}}
records = []


def mutate(i):
    shared.append(i)
    registry.setdefault("by_mod", {}).setdefault(i % 3, []).append(i)
    records.append({"i": i, "ref": shared, "sq": [j * j for j in range(i % 5)]})
    time.sleep(0.003)


def check():
    same = registry["a"] is registry["b"] is shared is registry["nested"]["deep"][1]
    every = all(r["ref"] is shared for r in records)
    return same, every, len(shared), sum(shared), sorted(registry["by_mod"].items())[:1]


for step in range(120):
    mutate(step)
    if step % 20 == 0:
        print(step, check())
print("done", check(), len(records))

import corpus_helper  # noqa: E402

corpus_helper.check_globals()
