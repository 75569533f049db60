"""A pause inside a framework's training loop: the loop is a library's, the script only gets
callbacks (Hugging Face's ``trainer.train()``, Lightning's ``trainer.fit()``, a loop over
``accelerator.prepare(loader)``).

The library here is ``minifw`` (``corpus/framework_lib``), written in those frameworks' shape and
installed beside the script as a library would be (outside the script's directory, with a
dist-info): ``train()`` reaches its loop through ``functools.partial`` as HF's does, the loop
iterates a generator loader and runs inside an ``@contextmanager``, and its states are shared
through class-level dicts as accelerate's are. Pure Python, so it runs on every interpreter; the
real frameworks are exercised in ``test_capture_frameworks_real.py``.

Paused at random moments while training runs and resumed in a new process, the output is the
uninterrupted run's byte for byte; a resume where the library's code changed is refused before
any of the state loads, naming the library and both versions; an edit elsewhere in its files
(a line added) resumes.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _harness import (
    CORPUS,
    EXIT_PAUSED,
    EXIT_REFUSED,
    pause_when,
    resume_noted,
    run_chain,
    runtime,
)

from portal.capture.image import read_image

JOB = CORPUS / "framework_job"
LIBRARY = CORPUS / "framework_lib"
STEPS = 39  # the script's steps: 3 epochs of 13 batches


@pytest.fixture
def installed(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The job's directory and the library installed outside it (a copy this test may edit),
    with the environment that finds it."""
    job = tmp_path / "job"
    shutil.copytree(JOB, job)
    site = tmp_path / "site"
    shutil.copytree(LIBRARY, site)
    return job, {**os.environ, "PYTHONPATH": str(site)}


def _plain(job: Path, env: dict[str, str], *args: str) -> bytes:
    done = subprocess.run(
        [sys.executable, "train.py", *args],
        cwd=job,
        env=env,
        capture_output=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def _steps(out: bytes) -> int:
    return sum(line.startswith(b"step ") for line in out.splitlines())


def _pause_in_training(
    job: Path, env: dict[str, str], steps: int, settle: float
) -> tuple[bytes, str]:
    paused = pause_when(
        job / "train.py",
        "0.02",
        ready=lambda out: _steps(out) >= steps,
        settle=settle,
        cwd=job,
        env=env,
    )
    assert paused.events[-1]["event"] == "paused", (paused.events, paused.err.decode()[-2000:])
    assert paused.returncode == EXIT_PAUSED
    # Paused while the library's loop ran: train() had not returned.
    assert b"shared state kept" not in paused.out, paused.out.decode()[-500:]
    assert 0 < _steps(paused.out) < STEPS
    return paused.out, paused.checkpoint


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_pause_inside_a_librarys_loop_resumes_identical(
    installed: tuple[Path, dict[str, str]], seed: int
) -> None:
    """Paused and resumed under different string-hash seeds, as two machines are: the
    carried loop's code holds a frozenset of names, whose repr's order follows the seed, and
    the installed loop must still be found the same."""
    job, env = installed
    rng = random.Random(seed)
    expected = _plain(job, env, "0.02")
    before, checkpoint = _pause_in_training(
        job, {**env, "PYTHONHASHSEED": str(seed)}, rng.randint(2, 30), rng.uniform(0, 0.05)
    )
    header = read_image(checkpoint).header
    carried = {(lib.module, lib.qualname): lib for lib in header.libraries}
    loop = carried[("minifw.trainer", "Trainer._inner_training_loop")]
    assert (loop.distribution, loop.version) == ("minifw", "1.0")
    assert ("minifw.accel", "Loader.__iter__") in carried  # the loader's generator travels
    after, _, _ = resume_noted(checkpoint, job, {**env, "PYTHONHASHSEED": str(seed + 100)})
    assert before + after == expected


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_a_changed_library_is_refused_before_the_state_loads(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    job, env = installed
    expected = _plain(job, env, "0.02")
    before, checkpoint = _pause_in_training(job, env, 5, 0.0)
    trainer = tmp_path / "site" / "minifw" / "trainer.py"
    metadata = tmp_path / "site" / "minifw-1.0.dist-info" / "METADATA"
    original = trainer.read_text(), metadata.read_text()
    _edit(trainer, "self.lr *= 0.9", "self.lr *= 0.8")  # a new release changed the loop
    _edit(metadata, "Version: 1.0", "Version: 1.1")
    refused = subprocess.run(
        runtime("resume", checkpoint),
        cwd=job,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    err = refused.stderr.decode()
    assert refused.returncode == EXIT_REFUSED, err
    assert "[CAPTURE_LIBRARY_MISMATCH]" in err
    assert "Trainer._inner_training_loop of minifw.trainer (trainer.py)" in err
    assert "paused with minifw 1.0; this machine has minifw 1.1" in err
    assert "install minifw==1.0 here" in err
    assert "Traceback" not in err and refused.stdout == b""  # no line of the program ran
    # Nothing is lost: with the library as it was, the same checkpoint resumes.
    trainer.write_text(original[0])
    metadata.write_text(original[1])
    after, _, _ = resume_noted(checkpoint, job, env)
    assert before + after == expected


def test_an_edit_elsewhere_in_the_library_resumes(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """Lines added above the carried functions move them, and a function not carried changes:
    what the paused frames run is the same, so the resume goes on."""
    job, env = installed
    expected = _plain(job, env, "0.02")
    before, checkpoint = _pause_in_training(job, env, 7, 0.01)
    trainer = tmp_path / "site" / "minifw" / "trainer.py"
    _edit(trainer, "import functools\n", "import functools\n\n# a comment of a new release\n")
    _edit(
        trainer,
        "        pass\n\n    def on_epoch_end",
        "        return None\n\n    def on_epoch_end",
    )
    after, _, _ = resume_noted(checkpoint, job, env)
    assert before + after == expected


@pytest.mark.parametrize("seed", [4, 5])
def test_paused_again_and_again_inside_the_library(
    installed: tuple[Path, dict[str, str]], seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed library frame (rebuilt with a prologue; its caller's partial now a direct
    call) pauses again, and again: the output is still the uninterrupted run's."""
    job, env = installed
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])
    expected = _plain(job, env, "0.02")
    chain = run_chain(
        job / "train.py", random.Random(seed), args=("0.02",), max_pauses=3, max_delay=0.6, cwd=job
    )
    assert chain.pauses >= 1, [s.err.decode()[-500:] for s in chain.segments]
    assert chain.segments[-1].rc == 0, chain.segments[-1].err.decode()[-2000:]
    assert chain.stdout == expected
