"""Differential tests: a script paused at random moments and resumed (and paused again) in new
processes prints byte for byte what an uninterrupted run prints."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from _harness import EXIT_PAUSED, paused_at_least_once, plain_run, run_chain

CORPUS_SCRIPTS = [
    "nested_calls.py",
    "classes.py",
    "comprehensions.py",
    "data_heavy.py",
    "uses_module.py",
    "recursion.py",
    "closures.py",
    "generators.py",
]
CHAINS = 3


@pytest.mark.parametrize("name", CORPUS_SCRIPTS)
def test_paused_and_resumed_run_prints_what_a_plain_run_prints(
    corpus: Path, rng: random.Random, name: str
) -> None:
    script = corpus / name
    expected = plain_run(script)
    assert expected.returncode == 0, expected.stderr.decode()
    seeds = [rng.randrange(1 << 30) for _ in range(CHAINS)]
    with ThreadPoolExecutor(CHAINS) as pool:
        chains = list(pool.map(lambda s: run_chain(script, random.Random(s)), seeds))
    chains = paused_at_least_once(
        chains, lambda: run_chain(script, random.Random(0), max_pauses=1, max_delay=0.0)
    )
    for chain in chains:
        trail = [(s.rc, s.how) for s in chain.segments]
        assert chain.segments[-1].rc == 0, (trail, chain.stderr.decode())
        assert chain.stderr == expected.stderr, trail
        assert chain.stdout == expected.stdout, trail
    # The random delays must actually pause: over all chains at least one pause happened.
    assert sum(c.pauses for c in chains) >= 1
    assert all(s.rc in (0, EXIT_PAUSED) for c in chains for s in c.segments)
