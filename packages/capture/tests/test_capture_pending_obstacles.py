"""A pause asked for while the program runs inside a call no safe point can be in (``list()``
over a generator of the script, ``map()`` of a function of the script: pyperformance's nqueens
shape) is taken at the first line outside it, at once, and the program runs at (nearly) full
speed meanwhile; the resumed output is the plain run's."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from _harness import EXIT_PAUSED, Paused, pause_when, plain_run, runtime

BOARDS = """
import sys
import time


def numbers(n):
    for i in range(n):
        yield i


def solutions(n):
    for i in numbers(n):
        if sum(d for d in range(i % 7)) % 3 == 0:
            yield i


def step(i):
    x = i * i
    return x % 7


mode = sys.argv[1]
for board in range(4):
    print(f"board {board} starts", flush=True)
    started = time.perf_counter()
    if mode == "generator":
        found = len(list(solutions(1_000_000)))
    else:
        found = sum(map(step, range(4_000_000)))
    print(f"board {board}: {found}", flush=True)  # the first line after the call
    print(f"took {time.perf_counter() - started:.3f}", file=sys.stderr, flush=True)
"""
_PRINT_LINE = next(i for i, line in enumerate(BOARDS.splitlines(), 1) if "first line" in line)


def _resume(paused: Paused, cwd: Path, env: dict[str, str] | None = None) -> bytes:
    resumed = subprocess.run(
        runtime("resume", paused.checkpoint),
        capture_output=True,
        cwd=cwd,
        timeout=120,
        check=False,
        env=env,
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    return resumed.stdout


@pytest.mark.parametrize("mode", ["generator", "map"])
def test_a_pause_inside_a_long_call_is_taken_at_the_next_module_line(
    tmp_path: Path, mode: str
) -> None:
    script = tmp_path / "boards.py"
    script.write_text(BOARDS)
    plain = plain_run(script, mode)
    assert plain.returncode == 0, plain.stderr.decode()
    board_s = max(float(t) for t in re.findall(rb"took ([0-9.]+)", plain.stderr))

    run = pause_when(
        script,
        mode,
        ready=lambda out: out.endswith(b"board 1 starts\n"),  # board 1 runs inside its call
        settle=min(0.1, board_s / 4),
        cwd=tmp_path,
    )
    paused = run.events[-1]
    assert paused["event"] == "paused", (run.events[-3:], run.err.decode())
    assert run.returncode == EXIT_PAUSED
    assert paused["paused_at"] == f"boards.py:{_PRINT_LINE} in <module>"
    # Taken when the board in progress ends (the board was ~35 times slower while a pause was
    # pending, as every line inside tried it and failed). 3.11's tracer costs ~2x meanwhile.
    assert paused["seconds_to_safe_point"] < 4 * board_s + 1.0, (paused, board_s)
    assert run.out.count(b"board 2") == 0  # the pause is at the end of board 1
    assert run.out + _resume(run, tmp_path) == plain.stdout


FILES = """
import io
import sys
import tokenize

SOURCE = "total = 1 + 2  # a line\\n" * 1500


def check(text):
    count = 0
    # tokenize's generator (a library's, partway through) is on this frame's stack meanwhile
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        count += len(token.string)
    return count


for number in range(int(sys.argv[1])):
    print(f"file {number}: {check(SOURCE)}", flush=True)
"""


def test_a_pause_held_by_a_frame_s_value_is_taken_when_the_frame_lets_go(
    tmp_path: Path,
) -> None:
    """pycodestyle's shape: a file's check holds a library's generator on its stack, and the gap
    between two files is short. The pause is taken in that gap (the events are narrowed to the
    holding frame and those outside it, each line asking whether the value has left), or at a
    line of the generator's own, never at the script's end; and it resumes identical."""
    script = tmp_path / "files.py"
    script.write_text(FILES)
    files = "120"
    plain = plain_run(script, files)
    assert plain.returncode == 0, plain.stderr.decode()

    run = pause_when(
        script,
        files,
        ready=lambda out: out.endswith(b"\n") and out.splitlines()[-1].startswith(b"file 3:"),
        cwd=tmp_path,
    )
    kinds = [e["event"] for e in run.events]
    assert kinds[-1] == "paused", (run.events[-3:], run.err.decode())
    paused_at = run.events[-1]["paused_at"]
    # In the gap, or inside tokenize's generator itself: a library's frames travel too, so
    # a line of it is a safe point where the generator is not a value held but a frame.
    in_tokenize = paused_at.startswith("tokenize.py:") and paused_at.endswith("under files.py:12")
    # The gap: check's return, the loop's next turn (its `for` line) or the next print.
    gap = {"files.py:14 in check", "files.py:17 in <module>", "files.py:18 in <module>"}
    assert in_tokenize or paused_at in gap, paused_at
    done = run.out.count(b"\n")
    assert done < 30, done  # within a few files of the notice, not at the end
    assert run.out + _resume(run, tmp_path) == plain.stdout


SLOW_LIBRARY = """
import time

for _ in range(200):  # a library's import that takes seconds (torch's takes 2-4 s)
    time.sleep(0.01)
VALUE = 42
"""


def test_a_notice_during_a_library_s_import_is_told_at_once_and_taken_after_it(
    tmp_path: Path,
) -> None:
    """No line of the script runs while a library imports: the pause says at once what it
    waits for (the import), and is taken at the script's next line."""
    lib, job = tmp_path / "lib", tmp_path / "job"
    lib.mkdir()
    job.mkdir()
    (lib / "slowlib.py").write_text(SLOW_LIBRARY)
    script = job / "main.py"
    script.write_text(
        "import sys\n\nprint('importing', flush=True)\nimport slowlib\n\n"
        "print('imported', slowlib.VALUE, flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(lib)}
    run = pause_when(script, ready=lambda out: out == b"importing\n", settle=0.3, cwd=job, env=env)
    kinds = [e["event"] for e in run.events]
    assert kinds == ["pending", "deferred", "paused"], (run.events, run.err.decode())
    (problem,) = run.events[1]["problems"]
    assert problem["type_name"] == "import", problem
    assert run.events[-1]["paused_at"] == "main.py:6 in <module>"
    assert run.out == b"importing\n"
    assert _resume(run, job, env) == b"imported 42\n"


def test_a_notice_during_an_import_portal_watches_waits_outside_it(tmp_path: Path) -> None:
    """torch's import runs under Portal's own import hook (which records torch's settings as
    the import left them): its lines are the program's import, not Portal at work. The pause
    says at once that it waits for the import, listens only outside it (the import runs at
    full speed: every line of it had walked the stack, and an import of 3 s took more than the
    notice's 30), and is taken at the script's next line. Seen in CI: a training script's
    notice during ``import torch`` abandoned at its deadline."""
    pytest.importorskip("torch")
    script = tmp_path / "main.py"
    script.write_text(
        "print('importing', flush=True)\nimport torch\n\n"
        "print('imported', torch.tensor([1, 2]).sum().item(), flush=True)\n"
    )
    run = pause_when(script, ready=lambda out: out == b"importing\n", settle=0.2, cwd=tmp_path)
    kinds = [e["event"] for e in run.events]
    assert kinds == ["pending", "deferred", "paused"], (run.events, run.err.decode())
    (problem,) = run.events[1]["problems"]
    assert problem["type_name"] == "import", problem
    assert run.events[-1]["paused_at"] == "main.py:4 in <module>"
    assert _resume(run, tmp_path) == b"imported 3\n"
