"""``bladekit run FILE::FUNCTION`` and ``bladekit preempt`` as a user types them: real processes.

The Trainer test is the spec's example, made safe to preempt mid-call (``scripts/trainer_app.py``),
run by the console script with a preemption delivered by ``bladekit preempt`` from another process
in the middle of its single ``fit`` call: its output must equal an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bladekit.listing import runs
from portal.testing.registry import unpacked_wheel

APP = Path(__file__).parent / "scripts" / "trainer_app.py"
_SCRIPT = Path(sys.executable).parent / "bladekit"
BLADEKIT = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "bladekit.cli"]


def bladekit(
    *words: str, home: Path, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BLADEKIT, *words],
        env={**os.environ, "PORTAL_HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_paragraph_error(done: subprocess.CompletedProcess[str]) -> str:
    """The error the command printed: a single 'bladekit: ...' paragraph, never a traceback."""
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("bladekit: ")]
    errors = [line for line in lines if not line.startswith("bladekit: running ")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def said_once(done: subprocess.CompletedProcess[str], says: str) -> str:
    """The error paragraph, which says ``says``; no other line of stderr (a log line) says it
    again. (Other lines may come: a container killed at the end of a grace window under load is
    reported, rightly, on its own.)"""
    message = one_paragraph_error(done)
    assert says in message
    repeated = [line for line in done.stderr.splitlines() if says in line and line != message]
    assert repeated == [], done.stderr
    return message


def wait_for_pid(marker: Path, timeout: float = 60) -> int:
    """The container pid ``nap`` wrote to ``marker`` once its call runs."""
    deadline = time.time() + timeout
    while not marker.exists():
        assert time.time() < deadline, "the call never started"
        time.sleep(0.05)
    return int(marker.read_text())


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for a reaper counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def interruptible() -> None:
    """In the child: Ctrl-C raises KeyboardInterrupt even when the tests run in the background
    (where SIGINT is ignored, and Python then installs no handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def expected_fit(steps: int) -> dict[str, object]:
    weight, seen = 1.0, []
    for i in range(steps):
        weight = weight * 0.9 + float(i)
        seen.append(float(i))
    return {"step": steps, "weight": weight, "seen": seen}


def test_trainer_preempted_mid_call_equals_an_uninterrupted_run(portal_home: Path) -> None:
    steps = 60
    clean = bladekit("run", f"{APP}::Trainer.fit", str(steps), home=portal_home, BK_VOLUME="clean")
    assert clean.returncode == 0, clean.stderr
    uninterrupted = json.loads(clean.stdout)
    assert uninterrupted == expected_fit(steps)

    command = [*BLADEKIT, "run", f"{APP}::Trainer.fit", "--steps", str(steps), "--step-s", "0.04"]
    env = {**os.environ, "PORTAL_HOME": str(portal_home), "BK_VOLUME": "preempted"}
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        # The run shows in the listing with a checkpoint once a few steps are done.
        deadline = time.time() + 60
        row = None
        while row is None:
            assert time.time() < deadline, "the run never saved a checkpoint"
            found = [r for r in runs(portal_home) if r.state == "running"]
            if found and found[0].checkpoint_bytes:
                row = found[0]
            time.sleep(0.05)
        notice = bladekit("preempt", row.run_id, "--seconds", "1.5", home=portal_home)
        assert notice.returncode == 0, notice.stderr
        out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert json.loads(out) == uninterrupted
    # It really was cut short and resumed from a checkpoint, not restarted from zero.
    starts = [
        int(line.rsplit(" ", 1)[1]) for line in err.splitlines() if "starting at step" in line
    ]
    assert starts[0] == 0 and len(starts) == 2 and 0 < starts[1] < steps
    (listed,) = [r for r in runs(portal_home) if r.run_id == row.run_id]
    assert (listed.state, listed.attempts, listed.interruptions) == ("done", 2, 1)
    assert listed.app == "train-resnet" and listed.function == "Trainer"
    assert listed.ended_at is not None and listed.checkpoint_at is not None
    assert not Path("/ckpt").exists() or Path("/ckpt").is_dir()  # never created by bladekit


def test_arguments_follow_the_signature(portal_home: Path) -> None:
    done = bladekit("run", f"{APP}::add", "2", "--b", "3", "--twice", home=portal_home)
    assert (done.returncode, done.stdout) == (0, "10\n"), done.stderr
    done = bladekit("run", f"{APP}::add", "--a=4", home=portal_home)
    assert (done.returncode, done.stdout) == (0, "5\n"), done.stderr
    helped = bladekit("run", f"{APP}::add", "--help", home=portal_home)
    assert helped.returncode == 0 and "--a INT" in helped.stdout and "--no-twice" in helped.stdout


def test_a_class_with_its_own_run_method(portal_home: Path) -> None:
    done = bladekit("run", f"{APP}::Job.run", "tests", home=portal_home)
    assert (done.returncode, done.stdout) == (0, "ran tests\n"), done.stderr


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["missing.py::f"], "missing.py: no such file"),
        (["::add"], "names no file before '::'"),
        ([f"{APP}"], "no local entrypoint, and FILE alone runs the local entrypoint"),
        ([f"{APP}::trian"], "has no 'trian'"),
        ([f"{APP}::Trainer"], "is a class: name one of its remote methods"),
        ([f"{APP}::Trainer.nope"], "has no remote method 'nope'"),
        ([f"{APP}::Model"], "is a plain class, not a bladekit function"),
        ([f"{APP}::add", "x"], "--a 'x' is not a valid int"),
        ([f"{APP}::add"], "needs a: give --a VALUE"),
        ([f"{APP}::add", "1", "--c", "2"], "has no parameter --c"),
        ([f"{APP}::add", "1", "2", "3"], "is one more"),
        ([f"{APP}::add", "1", "--a", "100"], "a is given twice: the word '1' fills it"),
    ],
)
def test_bad_commands_say_what_and_how_to_fix(
    portal_home: Path, words: list[str], says: str
) -> None:
    done = bladekit("run", *words, home=portal_home, timeout=60)
    assert done.returncode == 2
    assert says in one_paragraph_error(done)


def test_a_function_that_raises(portal_home: Path) -> None:
    done = bladekit("run", f"{APP}::fail", "--message", "bad input 42", home=portal_home)
    assert done.returncode == 1
    message = one_paragraph_error(done)
    assert "raised ValueError: bad input 42" in message and "function's own error" in message
    saved = Path(message.split("Its traceback is in ")[1].rstrip("."))
    assert "bad input 42" in saved.read_text()
    (row,) = runs(portal_home)
    assert row.state == "failed"


def test_a_function_that_raises_an_unpicklable_exception(portal_home: Path) -> None:
    """Its exception cannot come back as itself (it holds a lock): still the function's own
    error, exit 1, with the container's traceback saved like any other."""
    done = bladekit("run", f"{APP}::fail_locked", "--message", "locked 7", home=portal_home)
    assert done.returncode == 1, done.stderr
    message = one_paragraph_error(done)
    assert (
        "raised trainer_app.LockedError: locked 7" in message and "function's own error" in message
    )
    saved = Path(message.split("Its traceback is in ")[1].rstrip("."))
    assert saved.name == "traceback.txt"
    assert "LockedError: locked 7" in saved.read_text()
    (row,) = runs(portal_home)
    assert row.state == "failed"


def test_preempted_beyond_its_budget(portal_home: Path) -> None:
    command = [*BLADEKIT, "run", f"{APP}::sleepy", "30"]
    env = {**os.environ, "PORTAL_HOME": str(portal_home)}
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        deadline = time.time() + 60
        while not [r for r in runs(portal_home) if r.attempts]:
            assert time.time() < deadline
            time.sleep(0.05)
        (row,) = runs(portal_home)
        assert bladekit("preempt", row.run_id, "--seconds", "1", home=portal_home).returncode == 0
        _out, err = process.communicate(timeout=60)
    done = subprocess.CompletedProcess(command, process.returncode, _out, err)
    assert done.returncode == 3
    message = said_once(done, "more than max_interruptions=0 allows")
    assert "Raise max_interruptions" in message
    assert runs(portal_home)[0].state == "preempted-out"


def test_preempt_names_an_unknown_run(portal_home: Path) -> None:
    done = bladekit("preempt", "bk-nope", home=portal_home)
    assert done.returncode == 2 and "no run bk-nope" in one_paragraph_error(done)


def test_preempt_refuses_an_ended_run_and_a_grace_window_that_is_not_finite(
    portal_home: Path,
) -> None:
    assert bladekit("run", f"{APP}::add", "1", home=portal_home).returncode == 0
    (row,) = runs(portal_home)
    notices = row.dir / "attempts" / "1" / "notices"
    before = sorted(notices.iterdir())

    done = bladekit("preempt", row.run_id, "--seconds", "5", home=portal_home)
    assert done.returncode == 2
    message = one_paragraph_error(done)
    assert "has already ended (state done)" in message and "nothing was sent" in message
    for seconds in ("inf", "nan", "-1"):
        done = bladekit("preempt", row.run_id, "--seconds", seconds, home=portal_home)
        assert done.returncode == 2
        assert "is not valid: give a finite number of seconds" in one_paragraph_error(done)
    assert sorted(notices.iterdir()) == before  # nothing was written into the old attempt
    assert runs(portal_home)[0].state == "done"


def test_help_starts_fast_and_imports_little(portal_home: Path) -> None:
    started = time.monotonic()
    done = bladekit("--help", home=portal_home)
    assert done.returncode == 0 and "run" in done.stdout
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, bladekit.cli; print(sorted(m for m in sys.modules if m.startswith(('portal', 'cloudpickle', 'msgspec'))))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "[]"
    assert time.monotonic() - started < 10


def test_version_names_the_distribution(portal_home: Path) -> None:
    done = bladekit("--version", home=portal_home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("bladekit 0.") and done.stderr == ""


@pytest.mark.parametrize(
    ("taken", "wheel", "remove"),
    [
        ("bladekit", ("bladekit", "4.18.6"), "`pip uninstall bladekit`"),
        ("portal", ("portal", "3.8.3"), "`pip uninstall portal`"),
    ],
)
def test_another_projects_package_under_our_name_is_named_with_the_way_out(
    portal_home: Path, tmp_path: Path, taken: str, wheel: tuple[str, str], remove: str
) -> None:
    """Blade's own SDK (``bladekit`` on the index) or the other ``portal`` installed beside
    ours: the command names it and the way out, never ``No module named 'bladekit.cli'``."""
    assert _SCRIPT.exists(), f"the bladekit command is not installed beside {sys.executable}"
    site = unpacked_wheel(*wheel, tmp_path / "site")
    assert (site / taken / "__init__.py").exists()

    done = bladekit("run", f"{APP}::Trainer.fit", "3", home=portal_home, PYTHONPATH=str(site))

    assert done.returncode == 69, done.stderr
    assert "Traceback" not in done.stderr and "No module named" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"bladekit: the import name `{taken}` belongs to another project here ")
    assert f"({wheel[0]} {wheel[1]}, at {site / taken / '__init__.py'})" in line
    assert f"Remove it ({remove})" in line and line.endswith("[FOREIGN_PACKAGE]")


def test_ctrl_c_stops_the_run_at_once_and_records_it_failed(
    portal_home: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    command = [*BLADEKIT, "run", f"{APP}::nap", "20", str(marker)]
    env = {**os.environ, "PORTAL_HOME": str(portal_home)}
    with subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    ) as process:
        container = wait_for_pid(marker)
        interrupted = time.monotonic()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        took = time.monotonic() - interrupted
    done = subprocess.CompletedProcess(command, process.returncode, out, err)
    assert done.returncode == 130, err
    assert "was stopped" in one_paragraph_error(done)
    assert took < 5, f"stopping took {took:.1f} s"  # not the 10 s an idle container gets
    assert not alive(container)
    (row,) = runs(portal_home)
    assert row.state == "failed" and row.ended_at is not None
    assert row.reason is not None and "stopped" in row.reason


def test_the_container_dies_with_its_caller(portal_home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    with subprocess.Popen(
        [*BLADEKIT, "run", f"{APP}::nap", "60", str(marker)],
        env={**os.environ, "PORTAL_HOME": str(portal_home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as process:
        container = wait_for_pid(marker)
        process.kill()
    deadline = time.time() + 10
    while alive(container):
        assert time.time() < deadline, "the container outlived its caller"
        time.sleep(0.05)


def test_preempting_a_reserved_run_says_so_once(portal_home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    with subprocess.Popen(
        [*BLADEKIT, "run", f"{APP}::steady_nap", "2", str(marker)],
        env={**os.environ, "PORTAL_HOME": str(portal_home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        wait_for_pid(marker)
        (row,) = runs(portal_home)
        done = bladekit("preempt", row.run_id, home=portal_home)
        out, _err = process.communicate(timeout=60)
    assert done.returncode == 2
    message = said_once(done, "never preempted")
    assert "nothing was sent" in message
    assert (process.returncode, out) == (0, "rested\n")


ENTRY_APP = Path(__file__).parent / "scripts" / "entry_app.py"


def test_file_alone_runs_its_local_entrypoint_here(portal_home: Path) -> None:
    """``bladekit run FILE`` calls the app's ``@app.local_entrypoint()`` in this process, with
    the command line's words as its arguments; its calls to app functions start runs."""
    done = bladekit("run", str(ENTRY_APP), "--n", "4", home=portal_home)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "squares [0, 1, 4, 9]\n14\n"
    assert f"bladekit: running {ENTRY_APP}::main here" in done.stderr
    assert [r.function for r in runs(portal_home)] == ["square"] * 4
    assert all(r.state == "done" for r in runs(portal_home))


def test_a_local_entrypoint_that_raises_says_where(portal_home: Path) -> None:
    done = bladekit("run", f"{ENTRY_APP}::main", "2", "--fail", home=portal_home)
    assert done.returncode == 1, done.stderr
    error = one_paragraph_error(done)
    assert error.startswith(
        f"bladekit: {ENTRY_APP}::main raised ValueError: stopped at n=2 (at {ENTRY_APP}:"
    ), error
    assert done.stdout == "squares [0, 1]\n"
