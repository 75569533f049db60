"""Multi-process jobs end to end: ``python -m portal.runtime run --nproc-per-node N`` launches a
DDP script of torchrun's shape (gloo, CPU, 127.0.0.1, ports from the OS); a SIGTERM at a
random step pauses every rank at one consistent point, the launcher writes the set and exits
75, and ``resume`` continues every rank in new processes. Against an uninterrupted run of the
same launcher: stdout byte for byte, every rank's logged losses and parameters bit for bit.

The ranks learn of the pause each on its own (each polls the store), so they arm skewed by up
to one polling interval, and may stop at different lines. The failure cases: a rank that can
never be carried (nobody pauses, all run on, the deadline is reported), a set that cannot be
written (all run on, the failure is reported), a rank killed while writing its part (the job
ends, the previous set stays in force), and torchrun's own launch (refused).

CI runs one case of each shape (:data:`SHAPES`: W=2, W=3, W=3 with new_group subgroups, DDP on
a group of its own), chosen by the seed printed; ``PORTAL_RANKS_ALL=1`` runs all of them
(:data:`SEEDS` each).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _harness import Control, connect, short_dir

pytest.importorskip("torch")

from portal.runtime.rankset import read_layout

SCRIPT = Path(__file__).parent / "torch_scripts" / "ddp_train.py"
STEPS = 200
SEEDS = 8
#: (ranks, GROUPS of ddp_train.py): DDP on the default group; with two new_group subgroups
#: beside; DDP on a group of its own.
SHAPES = [(2, "0"), (3, "0"), (3, "1"), (2, "2")]
SEED = int(os.environ.get("PORTAL_TEST_SEED") or random.SystemRandom().randrange(1 << 30))


def _cases() -> list[tuple[int, str, int]]:
    every = [(w, sub, i) for w, sub in SHAPES for i in range(SEEDS)]
    if os.environ.get("PORTAL_RANKS_ALL") == "1":
        return every
    pick = random.Random(f"ranks:{SEED}")
    return [(w, sub, pick.randrange(SEEDS)) for w, sub in SHAPES]


def _runtime(*args: str) -> list[str]:
    return [sys.executable, "-m", "portal.runtime", *args]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "PORTAL_"))}
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


def _args(out: Path, groups: str, hold: str = "") -> list[str]:
    return [str(SCRIPT), str(STEPS), str(out), groups, hold or "@-1"]


def _results(out: Path, world: int) -> list[str]:
    return [(out / f"rank{r}.json").read_text() for r in range(world)]


Reference = tuple[bytes, list[str]]


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int, str], Reference]:
    """The uninterrupted run of each shape (run once): its stdout and every rank's results."""
    made: dict[tuple[int, str], Reference] = {}

    def reference(world: int, groups: str) -> Reference:
        if (world, groups) not in made:
            folder = tmp_path_factory.mktemp(f"plain{world}{groups}")
            done = subprocess.run(
                _runtime("run", "--nproc-per-node", str(world), *_args(folder / "out", groups)),
                capture_output=True,
                env=_env(),
                cwd=folder,
                timeout=180,
            )
            assert done.returncode == 0, done.stderr.decode()[-3000:]
            made[world, groups] = (done.stdout, _results(folder / "out", world))
        return made[world, groups]

    return reference


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _start(folder: Path, command: list[str], stdout: Path, **env: str) -> subprocess.Popen[bytes]:
    with stdout.open("wb") as out, (folder / f"{stdout.stem}.err").open("wb") as err:
        return subprocess.Popen(command, stdout=out, stderr=err, env=_env(**env), cwd=folder)


def _when_lines(proc: subprocess.Popen[bytes], stdout: Path, lines: int) -> None:
    end = time.monotonic() + 120
    while _lines(stdout) < lines:
        assert proc.poll() is None, f"the job ended before step {lines}"
        assert time.monotonic() < end
        time.sleep(0.005)


def _err(folder: Path, name: str) -> str:
    return (folder / f"{name}.err").read_text(errors="replace")[-4000:]


_SHAPE_NAMES = {"0": "ddp", "1": "subgroups", "2": "ddp-on-a-group"}


@pytest.mark.parametrize(
    ("world", "groups", "case"),
    _cases(),
    ids=lambda v: _SHAPE_NAMES[v] if isinstance(v, str) else str(v),
)
def test_ranks_pause_together_and_resume_bit_for_bit(
    tmp_path: Path, plain: Callable[[int, str], Reference], world: int, groups: str, case: int
) -> None:
    rng = random.Random(f"{SEED}:{world}:{groups}:{case}")
    print(f"seed={SEED} (PORTAL_TEST_SEED={SEED} reproduces)")
    expected_out, expected = plain(world, groups)
    out, ck = tmp_path / "out", tmp_path / "job.portal"
    first = tmp_path / "first.txt"
    proc = _start(
        tmp_path,
        _runtime(
            "run", "--nproc-per-node", str(world), "--checkpoint", str(ck), *_args(out, groups)
        ),
        first,
    )
    _when_lines(proc, first, rng.randrange(2, STEPS - 30))
    time.sleep(rng.uniform(0, 0.02))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 75, _err(tmp_path, "first")
    assert ck.exists() and not list(tmp_path.glob(".job.portal.*"))
    print("paused at", read_layout(ck).header.paused_at)  # ranks may stand at different lines
    second = tmp_path / "second.txt"
    resumed = _start(tmp_path, _runtime("resume", str(ck)), second)
    assert resumed.wait(timeout=180) == 0, _err(tmp_path, "second")
    assert first.read_bytes() + second.read_bytes() == expected_out
    assert _results(out, world) == expected


def _controlled(
    work: Path, hold: str = "", checkpoint: Path | None = None
) -> tuple[subprocess.Popen[bytes], Control, Path]:
    """A W=2 job with a control socket (as the node runs it), once it has printed 5 steps;
    its checkpoint at ``checkpoint`` (``work/job.portal`` unless given)."""
    stdout = work / "out.txt"
    command = _runtime(
        "run", "--nproc-per-node", "2", "--checkpoint", str(checkpoint or work / "job.portal"),
        "--control", str(work / "c.sock"), *_args(work / "out", "0", hold),
    )  # fmt: skip
    proc = _start(work, command, stdout)
    control = connect(proc, str(work / "c.sock"))  # type: ignore[arg-type]
    assert control is not None
    _when_lines(proc, stdout, 5)
    return proc, control, stdout


def test_a_rank_that_can_never_be_carried_leaves_every_rank_running(
    plain: Callable[[int, str], Reference],
) -> None:
    """Rank 1 holds a socket: no safe point can carry it, so no pause is ever committed. Every
    rank runs on to the end (nothing hangs on it), and the node hears what held it and that
    the deadline passed."""
    expected_out, expected = plain(2, "0")
    work = Path(short_dir())
    ck = work / "job.portal"
    proc, control, stdout = _controlled(work, "socket@1")
    control.pause(within=1.0)
    events = control.events_until({"abandoned", "paused"}, timeout=60)
    control.close()
    kinds = [e["event"] for e in events]
    assert kinds[0] == "pending" and kinds[-1] == "abandoned", events
    assert events[-1]["reason"] == "deadline"
    problems = [p for e in events if e["event"] == "deferred" for p in e["problems"]]
    assert any(p["name"] == "extra" and "socket" in p["type_name"] for p in problems), events
    assert proc.wait(timeout=120) == 0, _err(work, "out")
    assert stdout.read_bytes() == expected_out
    assert _results(work / "out", 2) == expected
    assert not ck.exists()


def test_a_set_that_cannot_be_written_leaves_every_rank_running(
    plain: Callable[[int, str], Reference],
) -> None:
    """Every part is written, but the set is not (its file's place is taken): the launcher
    answers abort, every rank runs on, and the node hears why."""
    expected_out, expected = plain(2, "0")
    work = Path(short_dir())
    ck = work / "job.portal"
    (work / ".job.portal.ranks" / "set.portal").mkdir(parents=True)  # where the set is written
    proc, control, stdout = _controlled(work)
    control.pause(within=1.0)
    events = control.events_until({"abandoned", "paused"}, timeout=60)
    control.close()
    failed = [e for e in events if e["event"] == "failed"]
    assert failed and "set.portal" in failed[0]["error"], events
    assert events[-1]["event"] == "abandoned"
    assert proc.wait(timeout=120) == 0, _err(work, "out")
    assert stdout.read_bytes() == expected_out
    assert _results(work / "out", 2) == expected
    assert not ck.exists()


@contextlib.contextmanager
def _hold_writes(paths: list[Path], started: int = 1 << 20) -> Iterator[Callable[[], list[Path]]]:
    """Make each of ``paths`` (a file a writer is yet to create) a FIFO read only until
    ``started`` bytes came through: the writer then blocks mid-file, on a full pipe, for as long
    as the block lasts. Yields a poll that names the paths whose writer got that far; the
    FIFOs are gone after the block.

    A temporary file a checkpoint is written to exists for a fraction of a second; watching
    for it raced with the write (a loaded CI machine missed it for 60 s). Holding the write
    open makes "killed while it writes" a moment that lasts."""
    readers: dict[Path, int] = {}
    got = dict.fromkeys(paths, 0)
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
        # Non-blocking: the open does not wait for a writer, and a read never waits either.
        readers[path] = os.open(path, os.O_RDONLY | os.O_NONBLOCK)

    def poll() -> list[Path]:
        for path, fd in readers.items():
            while got[path] < started:
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                got[path] += len(chunk)
        return [path for path in paths if got[path] >= started]

    try:
        yield poll
    finally:
        for fd in readers.values():
            os.close(fd)
        for path in paths:
            path.unlink(missing_ok=True)


def test_a_rank_killed_while_writing_its_part_leaves_the_previous_set(
    tmp_path: Path, plain: Callable[[int, str], Reference]
) -> None:
    expected_out, expected = plain(2, "0")
    out, ck = tmp_path / "out", tmp_path / "job.portal"
    args = _args(out, "0", "big@1")
    first = tmp_path / "first.txt"
    proc = _start(
        tmp_path, _runtime("run", "--nproc-per-node", "2", "--checkpoint", str(ck), *args), first
    )
    _when_lines(proc, first, 10)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 75, _err(tmp_path, "first")
    kept = ck.read_bytes()
    second = tmp_path / "second.txt"
    resumed = _start(tmp_path, _runtime("resume", str(ck)), second)
    _when_lines(resumed, second, 20)
    ranks = _children(resumed.pid)
    assert len(ranks) == 2, ranks
    parts = tmp_path / ".job.portal.ranks"
    with _hold_writes([parts / f".rank1.portal.{pid}.tmp" for pid in ranks]) as writing:
        resumed.send_signal(signal.SIGTERM)
        end = time.monotonic() + 120
        while not (writers := writing()):
            assert resumed.poll() is None and time.monotonic() < end, _err(tmp_path, "second")
            time.sleep(0.01)
        os.kill(int(writers[0].name.split(".")[-2]), signal.SIGKILL)
        code = resumed.wait(timeout=120)
    assert code not in (0, 75), _err(tmp_path, "second")
    assert "ended with status" in _err(tmp_path, "second")
    assert ck.read_bytes() == kept  # the set from the first pause is still the job's
    third = tmp_path / "third.txt"
    again = _start(tmp_path, _runtime("resume", str(ck)), third)
    assert again.wait(timeout=180) == 0, _err(tmp_path, "third")
    assert first.read_bytes() + third.read_bytes() == expected_out
    assert _results(out, 2) == expected


def test_a_runtime_started_by_torchrun_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        _runtime("run", str(SCRIPT), "1", str(tmp_path)),
        capture_output=True,
        text=True,
        env=_env(TORCHELASTIC_RUN_ID="abc", RANK="0", WORLD_SIZE="1"),
        timeout=60,
    )
    assert done.returncode == 65
    assert "[CAPTURE_LAUNCHER]" in done.stderr and "--nproc-per-node N" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_periodic_checkpoint_is_one_set_and_the_ranks_run_on(
    plain: Callable[[int, str], Reference],
) -> None:
    """The node asks for a periodic checkpoint: the ranks agree as for a pause, the set is
    written, and they run on. The machine is then lost (every process killed): the job resumes
    from that set, its output from where the set's state left it."""
    expected_out, expected = plain(2, "0")
    work = Path(short_dir())
    sock, ck, periodic = str(work / "c.sock"), work / "job.portal", work / "periodic.portal"
    stdout = work / "out.txt"
    with stdout.open("wb") as out, (work / "out.err").open("wb") as err:
        proc = subprocess.Popen(
            _runtime(
                "run", "--nproc-per-node", "2", "--checkpoint", str(ck), "--control", sock,
                *_args(work / "out", "0"),
            ),
            stdout=out, stderr=err, env=_env(), cwd=work, start_new_session=True,
        )  # fmt: skip
    control = connect(proc, sock)  # type: ignore[arg-type]
    assert control is not None
    _when_lines(proc, stdout, 10)
    control.send({"op": "checkpoint", "path": str(periodic), "deadline": time.time() + 30})
    events = control.events_until({"checkpointed", "not-checkpointed"}, timeout=60)
    assert events[-1]["event"] == "checkpointed", events
    taken = events[-1]
    # At a line of the script (a rank pauses in the program's own code only); each rank at
    # its own line, as they may be.
    assert taken["checkpoint"] == str(periodic) and "ddp_train.py:" in taken["where"]
    assert "_tensor.py" not in taken["where"] and "module.py" not in taken["where"]
    lines = _lines(stdout)
    _when_lines(proc, stdout, lines + 10)  # the ranks ran on
    os.killpg(proc.pid, signal.SIGKILL)  # the machine is lost: no notice, no pause
    proc.wait(timeout=30)
    control.close()
    assert not ck.exists()
    again = work / "again.txt"
    resumed = _start(work, _runtime("resume", str(periodic)), again)
    assert resumed.wait(timeout=180) == 0, _err(work, "again")
    kept = stdout.read_bytes()[: taken["stdout_bytes"]]
    assert kept + again.read_bytes() == expected_out
    assert _results(work / "out", 2) == expected


def _periodic_set(control: Control, path: Path) -> dict[str, Any]:
    """A periodic set taken into ``path`` (its ``checkpointed`` event). One not agreed by its
    deadline is asked for again, once, as the node asks at its next interval: on a loaded
    machine (CI, 2 CPUs, a torch test beside it) the ranks once found no common safe point in
    60 s, the one holding 128 MiB walking its state while the other ran into the next step."""
    tried: list[list[dict[str, Any]]] = []
    for _ in range(2):
        control.send({"op": "checkpoint", "path": str(path), "deadline": time.time() + 90})
        events = control.events_until({"checkpointed", "not-checkpointed"}, timeout=150)
        tried.append(events)
        if events[-1]["event"] == "checkpointed":
            return events[-1]
        if events[-1].get("reason") != "deadline":
            break  # refused for what the state holds: asking again would say the same
    raise AssertionError(f"no periodic set was taken: {tried}")


def _resumed_from(
    work: Path, checkpoint: Path, taken: dict[str, Any], stdout: Path, expected: Reference
) -> None:
    """The job resumed from ``checkpoint`` (taken at ``taken``) ends as the uninterrupted run."""
    again = work / "again.txt"
    resumed = _start(work, _runtime("resume", str(checkpoint)), again)
    assert resumed.wait(timeout=180) == 0, _err(work, "again")
    kept = stdout.read_bytes()[: int(taken["stdout_bytes"])]
    assert kept + again.read_bytes() == expected[0]
    assert _results(work / "out", 2) == expected[1]


@pytest.mark.parametrize("moment", ["parts", "set"])
def test_the_launcher_killed_during_a_periodic_set_leaves_the_previous_one(
    plain: Callable[[int, str], Reference], moment: str
) -> None:
    """A periodic set is taken; the next is asked for into the same file, and the launcher is
    killed (its machine lost) while rank 1 writes its part (128 MiB), or while the launcher
    writes the set from the parts: the file still holds the first set, whole, and the job
    resumes from it as if never stopped. Nothing of the second is taken for a checkpoint.

    The write is held mid-file (:func:`_hold_writes`) at the temporary file it goes to."""
    expected = plain(2, "0")
    work = Path(short_dir())
    periodic = work / "periodic.portal"
    parts = work / ".job.portal.ranks"
    proc, control, stdout = _controlled(work, "big@1")
    _when_lines(proc, stdout, 10)
    taken = _periodic_set(control, periodic)
    kept = periodic.read_bytes()
    ranks = _children(proc.pid)
    assert len(ranks) == 2, ranks
    held = (
        [parts / f".rank1.portal.{pid}.tmp" for pid in ranks]  # which pid is rank 1: either
        if moment == "parts"
        else [parts / f".set.portal.{proc.pid}.tmp"]
    )
    with _hold_writes(held) as writing:
        _when_lines(proc, stdout, _lines(stdout) + 5)
        control.send({"op": "checkpoint", "path": str(periodic), "deadline": time.time() + 60})
        end = time.monotonic() + 120
        while not writing():
            assert proc.poll() is None and time.monotonic() < end, _err(work, "out")
            time.sleep(0.01)
        proc.kill()  # the launcher alone: its ranks die with it
        proc.wait(timeout=30)
        control.close()
        end = time.monotonic() + 30
        while any(_alive(r) for r in ranks):
            assert time.monotonic() < end, "a rank outlived its launcher"
            time.sleep(0.05)
    assert periodic.read_bytes() == kept
    _resumed_from(work, periodic, taken, stdout, expected)


def _events_to_end(control: Control, kinds: set[str], timeout: float) -> list[dict[str, Any]]:
    """Events up to the first of ``kinds``, or all of them until the runtime closed the
    channel (it ended)."""
    seen: list[dict[str, Any]] = []
    end = time.monotonic() + timeout
    with contextlib.suppress(EOFError):
        while not seen or seen[-1]["event"] not in kinds:
            seen.append(control.next_event(max(0.1, end - time.monotonic())))
    return seen


def test_no_space_while_a_rank_writes_its_part_leaves_the_previous_set_and_the_ranks_running(
    plain: Callable[[int, str], Reference],
) -> None:
    """The disk of the checkpoints has room when a pause begins, and fills while rank 1 writes
    its part (128 MiB). The pause is given up and said, no half-written part is taken or left,
    every rank runs on to its end, and the set taken before is whole and resumes as if never
    stopped.

    The disk fills at the same byte every time: rank 1's temporary file is made, before the
    pause, a link into a 32 MiB tmpfs. The room check before the write sees the parts'
    folder (room enough), and the write then meets ENOSPC from the kernel 32 MiB in, as on a
    disk another writer filled meanwhile. (Filling the disk while the part was written raced
    the write, a fraction of a second on a tmpfs: a loaded CI machine lost that race.)"""
    expected = plain(2, "0")
    work = Path(short_dir())
    # Outside the working directory, whose files every checkpoint carries.
    disk = Path(short_dir())
    small = Path(short_dir())
    parts = disk / ".job.portal.ranks"
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs", str(small)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"a small tmpfs cannot be mounted here: {mounted.stderr.strip()}")
    try:
        periodic = disk / "periodic.portal"
        proc, control, stdout = _controlled(work, "big@1", disk / "job.portal")
        _when_lines(proc, stdout, 10)
        taken = _periodic_set(control, periodic)
        kept = periodic.read_bytes()
        ranks = _children(proc.pid)
        assert len(ranks) == 2, ranks
        links = [parts / f".rank1.portal.{pid}.tmp" for pid in ranks]  # rank 1's: either pid
        parts.mkdir(exist_ok=True)
        for link in links:
            link.symlink_to(small / link.name)
        control.pause(within=3.0)
        events = _events_to_end(control, {"abandoned", "paused"}, timeout=120)
        control.close()
        assert "paused" not in [e["event"] for e in events], events
        said = _err(work, "out") + str(events)
        assert "filled up while it was written" in said, said
        assert any(e["event"] in ("failed", "not-checkpointed") for e in events), events
        assert proc.wait(timeout=180) == 0, _err(work, "out")  # every rank ran to its end
        assert stdout.read_bytes() == expected[0]
        assert _results(work / "out", 2) == expected[1]
        assert periodic.read_bytes() == kept
        # Nothing half-written is left behind: rank 1 took its link away with its partial
        # file (the other pid's link is rank 0's name for nothing; the test's own).
        assert len([link for link in links if link.is_symlink()]) == 1
        for link in links:
            link.unlink(missing_ok=True)
        assert not list(parts.glob("*.tmp"))
        _resumed_from(work, periodic, taken, stdout, expected)
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True)


def test_the_carry_check_reports_every_rank_as_one(plain: Callable[[int, str], Reference]) -> None:
    expected_out, _ = plain(2, "0")
    work = Path(short_dir())
    proc, control, stdout = _controlled(work, "socket@1")
    control.send({"op": "probe", "deadline": time.time() + 30})
    report = control.events_until({"probe"}, timeout=60)[-1]
    control.close()
    assert [p["name"] for p in report["problems"]] == ["extra"]
    assert report["problems"][0]["where"].startswith("rank 1: ")
    assert report["checked_bytes"] > 0
    assert proc.wait(timeout=120) == 0, _err(work, "out")
    assert stdout.read_bytes() == expected_out


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_no_rank_outlives_its_launcher(tmp_path: Path) -> None:
    """The launcher killed outright (its node gone): its ranks die with it, not train on."""
    stdout = tmp_path / "out.txt"
    endless = [str(SCRIPT), "1000000", str(tmp_path / "out")]
    proc = _start(tmp_path, _runtime("run", "--nproc-per-node", "2", *endless), stdout)
    _when_lines(proc, stdout, 3)
    ranks = _children(proc.pid)
    assert len(ranks) == 2
    proc.kill()
    proc.wait(timeout=30)
    end = time.monotonic() + 30
    while any(_alive(r) for r in ranks):
        assert time.monotonic() < end, "a rank outlived its launcher"
        time.sleep(0.05)


@pytest.mark.gpu
def test_ranks_on_a_gpu_pause_and_resume_bit_for_bit(tmp_path: Path) -> None:
    """Two ranks on the lent GPU(s): gloo all-reduces CUDA tensors, the drain synchronizes the
    GPU before the capture, and the parts carry the GPU state. Runs where CUDA is (see
    benchmarks/gpu_check.sh)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here")
    plain_out = tmp_path / "plain"
    plain_stdout = tmp_path / "plain.txt"
    command = _runtime("run", "--nproc-per-node", "2", *_args(plain_out, "0"))
    assert _start(tmp_path, command, plain_stdout, DDP_TRAIN_DEVICE="cuda").wait(180) == 0
    out, ck, first = tmp_path / "out", tmp_path / "job.portal", tmp_path / "first.txt"
    command = _runtime("run", "--nproc-per-node", "2", "--checkpoint", str(ck), *_args(out, "0"))
    proc = _start(tmp_path, command, first, DDP_TRAIN_DEVICE="cuda")
    _when_lines(proc, first, STEPS // 3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 75, _err(tmp_path, "first")
    second = tmp_path / "second.txt"
    resumed = _start(tmp_path, _runtime("resume", str(ck)), second, DDP_TRAIN_DEVICE="cuda")
    assert resumed.wait(timeout=180) == 0, _err(tmp_path, "second")
    assert first.read_bytes() + second.read_bytes() == plain_stdout.read_bytes()
    assert _results(out, 2) == _results(plain_out, 2)


def _rank_pids(launcher: int) -> dict[int, int]:
    """Each rank's pid, by its ``RANK``."""
    found = {}
    for pid in _children(launcher):
        with contextlib.suppress(OSError):
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            rank = next(v for v in env if v.startswith(b"RANK=")).split(b"=", 1)[1]
            found[int(rank)] = pid
    return found


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_a_rank_killed_after_the_set_is_committed_leaves_the_job_paused(
    tmp_path: Path, plain: Callable[[int, str], Reference]
) -> None:
    """The launcher answers ``go`` once the set holding every part is committed; a rank killed
    before it exits 75 (here: stopped once its part is in, killed once ``go`` is answered)
    takes nothing with it: the launcher exits 75 and the set resumes identical. Before, the
    launcher took the kill for a rank's failure, and the job for failed."""
    from portal.capture.distributed.rank import GO_PAUSE, PREFIX, STORE_ENV, connect

    expected_out, expected = plain(2, "0")
    out, ck = tmp_path / "out", tmp_path / "job.portal"
    outputs: list[Path] = []
    command = _runtime("run", "--nproc-per-node", "2", "--checkpoint", str(ck), *_args(out, "0"))
    for attempt in range(4):  # a rank that exits before it is stopped leaves no moment: again
        outputs.append(tmp_path / f"part{attempt}.txt")
        proc = _start(tmp_path, command, outputs[-1])
        _when_lines(proc, outputs[-1], 3)
        ranks = _rank_pids(proc.pid)
        assert sorted(ranks) == [0, 1], ranks
        environ = Path(f"/proc/{ranks[0]}/environ").read_bytes().split(b"\0")
        address = next(v for v in environ if v.startswith(f"{STORE_ENV}=".encode()))
        store = connect(address.split(b"=", 1)[1].decode())
        proc.send_signal(signal.SIGTERM)
        end = time.monotonic() + 120
        while not store.check([f"{PREFIX}part/0/1"]):
            assert proc.poll() is None and time.monotonic() < end, _err(tmp_path, outputs[-1].stem)
            time.sleep(0.0005)
        os.kill(ranks[1], signal.SIGSTOP)
        while not store.check([f"{PREFIX}outcome/0"]):
            assert time.monotonic() < end, _err(tmp_path, outputs[-1].stem)
            time.sleep(0.005)
        assert bytes(store.get(f"{PREFIX}outcome/0")) == GO_PAUSE
        caught = _state(ranks[1]) == "T"  # stopped alive, after its part and the go
        os.kill(ranks[1], signal.SIGKILL)
        del store
        assert proc.wait(timeout=120) == 75, _err(tmp_path, outputs[-1].stem)
        if caught:
            assert "rank 1 ended with status -9 after the checkpoint set was committed" in _err(
                tmp_path, outputs[-1].stem
            )
            break
        command = _runtime("resume", str(ck))
    else:
        pytest.fail("rank 1 exited before it could be stopped, four times")
    last = tmp_path / "last.txt"
    again = _start(tmp_path, _runtime("resume", str(ck)), last)
    assert again.wait(timeout=180) == 0, _err(tmp_path, "last")
    assert b"".join(p.read_bytes() for p in [*outputs, last]) == expected_out
    assert _results(out, 2) == expected
