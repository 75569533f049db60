"""The built-in capture extensions, end to end: a script that uses a global random generator or
changes process settings, paused at random moments and resumed in new processes, prints byte for
byte what an uninterrupted run prints."""

from __future__ import annotations

import random
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from _harness import EXIT_PAUSED, Chain, paused_at_least_once, plain_run, run_chain

# Chains run in parallel; numpy's import dominates each segment, so the numpy scripts get fewer
# and shorter chains to keep the file near 30 s on two cores. Each run draws new pause moments.
CHAINS = 2


def _check(chains: list[Chain], expected_out: bytes, expected_err: bytes) -> None:
    for chain in chains:
        trail = [(s.rc, s.how) for s in chain.segments]
        assert chain.segments[-1].rc == 0, (trail, chain.stderr.decode())
        assert chain.stderr == expected_err, trail
        assert chain.stdout == expected_out, trail
    assert sum(c.pauses for c in chains) >= 1
    assert all(s.rc in (0, EXIT_PAUSED) for c in chains for s in c.segments)


@pytest.mark.parametrize(
    ("name", "n", "pauses"), [("ext_random.py", 2, 4), ("ext_numpy_random.py", 1, 3)]
)
def test_global_random_generators_continue_after_a_resume(
    corpus: Path, rng: random.Random, name: str, n: int, pauses: int
) -> None:
    script = corpus / name
    expected = plain_run(script)
    assert expected.returncode == 0, expected.stderr.decode()
    seeds = [rng.randrange(1 << 30) for _ in range(n)]
    with ThreadPoolExecutor(n) as pool:
        chains = list(
            pool.map(lambda s: run_chain(script, random.Random(s), max_pauses=pauses), seeds)
        )
    chains = paused_at_least_once(
        chains, lambda: run_chain(script, random.Random(0), max_pauses=1, max_delay=0.0)
    )
    _check(chains, expected.stdout, expected.stderr)


def test_without_the_extensions_random_state_is_lost(
    corpus: Path, rng: random.Random, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reason the extension exists: ``random`` is pickled by name, so its hidden generator is
    not in a checkpoint. With the plugins off, a resumed run draws other numbers."""
    monkeypatch.setenv("PORTAL_DISABLE_PLUGIN_AUTOLOAD", "1")
    script = corpus / "ext_random.py"
    expected = plain_run(script)
    chain = run_chain(script, rng, max_pauses=1, max_delay=0.1)
    assert [s.rc for s in chain.segments] == [EXIT_PAUSED, 0], chain.stderr.decode()
    assert chain.stdout != expected.stdout


def test_changed_settings_and_environment_are_carried(tmp_path: Path, rng: random.Random) -> None:
    """cwd, sys.path, os.environ, warnings filters, the decimal context, the recursion limit,
    numpy print options and logging (a stdout handler, a file handler in append mode, levels)."""
    source = Path(__file__).parent / "corpus" / "ext_settings.py"

    def copy(name: str) -> Path:
        (tmp_path / name).mkdir()
        return Path(shutil.copy(source, tmp_path / name / source.name))

    expected = plain_run(copy("plain"))
    assert expected.returncode == 0, expected.stderr.decode()
    scripts = [copy(f"chain{i}") for i in range(CHAINS)]
    seeds = [rng.randrange(1 << 30) for _ in scripts]
    with ThreadPoolExecutor(CHAINS) as pool:
        chains = list(
            pool.map(
                lambda job: run_chain(job[0], random.Random(job[1]), max_pauses=3, max_delay=0.25),
                zip(scripts, seeds, strict=True),
            )
        )
    chains = paused_at_least_once(
        chains,
        lambda: run_chain(copy("rerun"), random.Random(0), max_pauses=1, max_delay=0.0),
    )
    _check(chains, expected.stdout, expected.stderr)
