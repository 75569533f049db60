"""Shared fixtures: the corpus and helper scripts, copied into a fresh directory per test."""

from __future__ import annotations

import os
import random
import shutil
import socket
from pathlib import Path

import pytest
from _harness import CORPUS

SCRIPTS = Path(__file__).parent / "corpus" / "cases"

# One seed for the run, fixed here, before pytest-xdist starts its workers (they inherit it):
# the seeded samples (which real programs, frameworks, rank shapes) are drawn as the test modules
# are collected, and every worker must collect the same tests.
os.environ.setdefault("PORTAL_TEST_SEED", str(random.SystemRandom().randrange(1 << 30)))


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    """A private copy of tests/corpus/cases (checkpoints land next to them)."""
    target = tmp_path / "scripts"
    shutil.copytree(SCRIPTS, target)
    return target


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("corpus")
    shutil.copytree(CORPUS, target, dirs_exist_ok=True)
    return target


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """Seeded per test; PORTAL_TEST_SEED=N reproduces a run."""
    seed = int(os.environ.get("PORTAL_TEST_SEED", random.SystemRandom().randrange(1 << 30)))
    print(f"seed={seed} (set PORTAL_TEST_SEED={seed} to reproduce)")
    return random.Random(f"{seed}:{request.node.nodeid}")


def free_port() -> int:
    """A loopback port the OS has free now (for a rendezvous store)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
