"""The program's own threads parked in a wait (``queue.get()``, ``event.wait()``) travel as the
main thread does, and are started again in that wait (``portal.capture.threads``): real pauses
of real programs under the runtime, against a plain run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from _harness import CORPUS, paused_against_plain

SCRIPT = CORPUS / "threads" / "parked_workers.py"
#: A queue worker and a Thread subclass waiting on an event; a thread polling at an interval,
#: whose wait times out every 20 ms (while a pause pickles too); threads waiting on conditions
#: in their own ``with`` blocks (``wait()`` on an RLock's, ``wait_for`` on a Lock's); threads
#: in ``time.sleep`` (a poller's 50 ms, a heartbeat's quarter second); pollers whose waits (an
#: event's, a queue's, a condition's, a semaphore's) time out every 2 ms, far more often than
#: the program's state takes to pickle, and a ``for item in iter(q.get, None)`` drainer.
SCRIPTS = [
    SCRIPT,
    CORPUS / "threads" / "waiting_poller.py",
    CORPUS / "threads" / "condition_waiters.py",
    CORPUS / "threads" / "sleeping_pollers.py",
    CORPUS / "threads" / "fast_pollers.py",
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
@pytest.mark.parametrize("at_step", [0, 6])
def test_parked_worker_threads_continue_in_their_wait_after_a_resume(
    tmp_path: Path, at_step: int, script: Path
) -> None:
    run = paused_against_plain(
        tmp_path, script, "30", ready=lambda out: out.count(b"step ") > at_step
    )
    assert run.out == run.plain.stdout, run.err.decode()[-3000:]
    assert b"step 29 " not in run.paused_out  # the pause came partway, not at the end
    assert run.err == run.plain.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
@pytest.mark.parametrize("seed", [1, 2])
def test_threads_resumed_once_pause_and_resume_again(
    tmp_path: Path, seed: int, script: Path
) -> None:
    """A thread started again at a resume stands in its wait under the resumed code (called
    through the wait's ``functools.partial``): a second and a third pause carry it from there."""
    import random

    from _harness import plain_run, run_chain

    source, script = script, tmp_path / script.name
    script.write_bytes(source.read_bytes())
    plain = plain_run(script, "40")
    assert plain.returncode == 0, plain.stderr.decode()
    chain = run_chain(script, random.Random(seed), args=("40",), max_pauses=3, max_delay=0.5)
    assert chain.segments[-1].rc == 0, chain.stderr.decode()[-3000:]
    assert chain.stdout == plain.stdout, chain.stderr.decode()[-3000:]
    assert chain.pauses >= 2, [(s.rc, s.how) for s in chain.segments]


def test_a_busy_thread_of_the_program_s_makes_the_pause_wait_until_it_parks(
    tmp_path: Path,
) -> None:
    import shutil

    from _harness import EXIT_PAUSED, plain_run, runtime

    from portal.capture.image import read_image

    script = tmp_path / "busy_worker.py"
    shutil.copy(CORPUS / "threads" / "busy_worker.py", script)
    ckpt = tmp_path / "busy.portal"
    first = subprocess.run(
        runtime("run", "--checkpoint", str(ckpt), str(script)),
        capture_output=True, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert first.returncode == EXIT_PAUSED, first.stderr.decode()[-3000:]
    problems = read_image(ckpt).header.problems
    waited = [p for p in problems if "thread 'cruncher' runs its own code" in p.reason]
    assert waited and waited[0].kind == "position", problems
    assert "busy_worker.py:" in waited[0].reason  # where the thread ran
    second = subprocess.run(
        runtime("resume", str(ckpt)), capture_output=True, cwd=tmp_path, timeout=120, check=False
    )
    assert second.returncode == 0, second.stderr.decode()[-3000:]
    assert first.stdout + second.stdout == plain_run(script).stdout


def test_the_program_sees_only_its_own_threads_before_and_after_a_resume(tmp_path: Path) -> None:
    run = paused_against_plain(
        tmp_path,
        CORPUS / "threads" / "counts_threads.py",
        ready=lambda out: out.count(b"step ") > 3,
    )
    assert run.plain.stdout.startswith(b"threads 1 ['MainThread']\n")
    assert run.out == run.plain.stdout, run.err.decode()[-3000:]


def test_a_thread_started_again_in_a_condition_s_wait_waits_before_the_resume_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bare ``cond.wait()`` does not look whether what it waits for has come: a ``notify`` the
    main thread sends before the resumed thread waits again is lost, and both wait for ever.
    So :func:`portal.capture.threads.start` returns once the thread stands in the wait (its
    first lines here take a while, as a resumed frame's restore may)."""
    import functools
    import threading
    import time

    from portal.capture import threads

    cond = threading.Condition()
    woke: list[bool] = []

    def entry() -> None:
        time.sleep(0.2)
        woke.append(threads._wait_again(cond, 30))
        cond.release()

    monkeypatch.setattr(threads, "_SETTLE_S", 60.0)  # a loaded machine: never the limit here
    thread = threading.Thread(name="late", daemon=True)
    record = threads.ThreadRecord(thread, [], functools.partial(threads._wait_again, cond, 30))
    threads.start(record, entry)
    with cond:
        assert len(cond._waiters) == 1  # type: ignore[attr-defined]
        cond.notify()
    thread.join(10)
    assert woke == [True]


def test_a_condition_s_lock_held_twice_by_its_waiter_is_not_read_as_parked() -> None:
    """``cond.wait()`` inside two ``with cond:`` blocks of an RLock's lets go of both holds; done
    again at the resume it would take the lock once, so the thread is one that runs (the
    pause waits), not a parked one."""
    import threading

    from portal.capture import threads

    assert threads._held_once(None)  # a Lock's condition
    assert threads._held_once((1, threading.get_ident()))
    assert not threads._held_once((2, threading.get_ident()))


@pytest.mark.parametrize("warm", [False, True], ids=["first-call", "warm"])
def test_a_frame_standing_in_time_sleep_is_read_with_its_seconds(warm: bool) -> None:
    """:func:`portal.capture.frames.c_call` finds the sleep a thread's frame stands in and its
    argument, on its first call and once the interpreter has specialized the call (3.11 makes
    the call from the ``PRECALL`` then); the frame continues after the call."""
    import sys
    import threading
    import time

    from portal.capture import frames, threads

    started = threading.Event()

    def sleeper(seconds: float) -> None:
        if warm:
            for _ in range(64):
                time.sleep(0)
        started.set()
        time.sleep(seconds)

    thread = threading.Thread(target=sleeper, args=(3.5,), daemon=True)
    thread.start()
    started.wait()
    call = None
    end = time.monotonic() + 3
    while call is None and time.monotonic() < end:  # until it stands in its sleep
        frame = sys._current_frames()[thread.ident or 0]
        assert frame.f_code is sleeper.__code__
        call = frames.c_call(frame, threads._is_sleep)
        time.sleep(0.01)
    assert call is not None and call.target is time.sleep and call.args == (3.5,)
    assert frames.c_call_continuation(frame) > frame.f_lasti
    assert frames.c_call(frame, lambda target: False) is None  # not what it was asked for
    thread.join()


def test_a_blocked_thread_s_cpu_time_is_its_mark_that_it_has_not_woken() -> None:
    """A sleep leaves no mark of its own; a blocked thread's CPU time does not grow, and grows
    the moment it wakes and runs (:func:`portal.capture.threads.moved` relies on this; the
    thread here blocks until it is told, so that no loaded machine can make it wake early)."""
    import threading
    import time

    from portal.capture import threads
    from portal.capture.holdback import SleepMark

    go, ran, done = threading.Event(), threading.Event(), threading.Event()

    def blocked() -> None:
        go.wait()
        sum(range(10_000))  # what a woken thread does: run
        ran.set()
        done.wait()  # blocked again, so that its clock can still be read

    thread = threading.Thread(target=blocked, daemon=True)
    thread.start()
    time.sleep(0.1)
    clock = threads._cpu_clock(thread.ident)
    if clock is None:
        pytest.skip("no per-thread CPU clock on this platform")
    end = time.monotonic() + 30
    while not _blocked(thread) and time.monotonic() < end:
        time.sleep(0.01)
    mark = SleepMark(clock, time.clock_gettime_ns(clock))
    time.sleep(0.2)
    assert mark.not_run() and mark()  # blocked all along
    go.set()
    assert ran.wait(30)
    assert not mark.not_run() and not mark()  # woke and ran (and no gate held it)
    done.set()
    thread.join(30)


def _blocked(thread: object) -> bool:
    """Whether the thread stands in its event's wait (blocked on the waiter lock)."""
    import sys
    import threading

    frame = sys._current_frames().get(getattr(thread, "ident", None) or 0)
    return frame is not None and frame.f_code is threading.Condition.wait.__code__


@pytest.mark.parametrize("lock", ["Lock", "RLock"])
def test_a_poller_whose_wait_times_out_is_held_back_until_the_pickle_is_done(lock: str) -> None:
    """While :func:`portal.capture.holdback.conditions_held` holds a condition, a thread whose
    timed wait on it ends runs none of its own lines and stays in the list of waiters (the
    checkpoint is kept); once the block ends it goes on, and the condition takes its lock again
    as before."""
    import threading
    import time

    from portal.capture import holdback, threads

    cond = threading.Condition(getattr(threading, lock)())
    had = vars(cond).get("_acquire_restore")
    looks: list[int] = []
    stop = False

    def poll() -> None:
        while not stop:
            with cond:
                cond.wait(0.002)
            looks.append(1)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    end = time.monotonic() + 10
    while not cond._waiters and time.monotonic() < end:  # type: ignore[attr-defined]
        time.sleep(0.0005)
    with holdback.conditions_held([cond]):
        waiter = cond._waiters[0]  # type: ignore[attr-defined]
        before = len(looks)
        time.sleep(0.3)  # 150 of its timeouts
        assert len(looks) == before
        assert threads._still_waits(cond, waiter)
    end = time.monotonic() + 10
    while len(looks) < before + 5 and time.monotonic() < end:
        time.sleep(0.01)
    assert len(looks) >= before + 5  # it went on
    assert vars(cond).get("_acquire_restore") == had  # the condition is as it was
    stop = True
    thread.join(10)
    assert not thread.is_alive()


def test_only_a_for_loop_over_iter_of_the_wait_is_read_as_one() -> None:
    """:func:`portal.capture.frames.callable_iteration` reads a ``FOR_ITER`` over ``iter(f,
    sentinel)`` whose ``f`` is the function the thread stands in, and nothing else: not a loop
    over another iterator, not a direct call."""
    import queue
    import sys
    import threading
    import time

    from portal.capture import frames

    q: queue.Queue[int | None] = queue.Queue()
    other: queue.Queue[int | None] = queue.Queue()

    def drain() -> None:
        for _ in iter(q.get, None):
            pass

    def direct() -> None:
        other.get()

    threads_ = [threading.Thread(target=f, daemon=True) for f in (drain, direct)]
    for t in threads_:
        t.start()
    end = time.monotonic() + 10
    while time.monotonic() < end and (
        not q.not_empty._waiters or not other.not_empty._waiters  # type: ignore[attr-defined]
    ):
        time.sleep(0.001)
    current = sys._current_frames()
    get_frames = []
    for t in threads_:
        f = current[t.ident or 0]
        while f.f_code is not queue.Queue.get.__code__:
            f = f.f_back
        get_frames.append(f)
    in_loop, in_call = get_frames
    assert frames.callable_iteration(in_loop, in_loop.f_back) is not None
    assert frames.callable_iteration(in_call, in_call.f_back) is None
    assert frames.callable_iteration(in_loop, in_call.f_back) is None  # another's frame
    q.put(None)
    other.put(None)
    for t in threads_:
        t.join(10)


def _standing_in_sleep(thread: object, timeout: float = 10.0) -> object:
    """The thread's frame once it stands in ``time.sleep`` (polled)."""
    import sys
    import time

    from portal.capture import frames, threads

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        frame = sys._current_frames().get(getattr(thread, "ident", None) or 0)
        if frame is not None and frames.c_call(frame, threads._is_sleep) is not None:
            return frame
        time.sleep(0.0003)
    raise AssertionError("the thread never stood in its sleep")


def test_a_sleeper_whose_sleep_ends_is_held_at_its_next_line_until_the_block_ends() -> None:
    """:func:`portal.capture.holdback.sleepers_held` holds a thread that sleeps 2 ms at a time at
    the first line after its sleep: it counts nothing while held, its mark says it has run nothing,
    and it goes on once the block ends (3.11 through a trace function on its own thread state,
    3.12+ through a monitoring tool of its own)."""
    import sys
    import threading
    import time

    from portal.capture import frames, threads
    from portal.capture.holdback import SleepMark, quiet_after, sleepers_held

    count = [0]
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            time.sleep(0.002)
            count[0] += 1

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    clock = threads._cpu_clock(thread.ident)
    if clock is None:
        pytest.skip("no per-thread CPU clock on this platform")
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.5)  # as the reader does: the sleeper gets no GIL until held
    try:
        frame = _standing_in_sleep(thread)
        mark = SleepMark(clock, time.clock_gettime_ns(clock))
        assert quiet_after(frame, frames.c_call_continuation(frame))  # type: ignore[arg-type]
        with sleepers_held([(thread.ident or 0, frame, mark)]):  # type: ignore[list-item]
            sys.setswitchinterval(interval)
            before = count[0]
            time.sleep(0.3)  # 150 of its sleeps
            assert count[0] == before
            assert mark.held and mark()
            assert mark.arrived
    finally:
        sys.setswitchinterval(interval)
    end = time.monotonic() + 10
    while count[0] < before + 5 and time.monotonic() < end:
        time.sleep(0.01)
    assert count[0] >= before + 5  # it went on
    stop.set()
    thread.join(10)
    assert sys.gettrace() is None or sys.version_info >= (3, 12)


def test_a_sleep_whose_line_goes_on_is_not_held_after_it() -> None:
    """``time.sleep(0.002); n += 1`` changes a value before the next line: such a thread is not
    held after its sleep (its CPU time alone is its mark)."""
    import threading
    import time

    from portal.capture import frames
    from portal.capture.holdback import quiet_after

    stop = threading.Event()
    seen = [0]

    def poll() -> None:
        while not stop.is_set():
            time.sleep(0.5); seen[0] += 1  # noqa: E702  # fmt: skip

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    frame = _standing_in_sleep(thread)
    assert not quiet_after(frame, frames.c_call_continuation(frame))  # type: ignore[arg-type]
    stop.set()
    thread.join(10)


def test_portal_s_own_threads_are_not_among_the_program_s() -> None:
    """:class:`portal.capture.unseen.UnseenThread` (the runtime's control thread, a rank's
    threads, a periodic checkpoint's writer) runs, is not listed by ``threading.enumerate()``,
    and can be waited for."""
    import threading

    from portal.capture.unseen import UnseenThread

    go, started, seen = threading.Event(), threading.Event(), []
    idents: list[int] = []
    before = threading.active_count()

    def work(n: int) -> None:
        idents.append(threading.get_ident())
        started.set()
        go.wait(30)
        seen.append(n)

    thread = UnseenThread(work, 7)
    assert started.wait(30)
    assert thread.is_alive()
    assert not thread.join(0.05)  # still waiting
    assert threading.active_count() == before
    assert idents[0] not in {t.ident for t in threading.enumerate()}
    go.set()
    assert thread.join(30) and not thread.is_alive()
    assert thread.join()  # once ended, at once
    assert seen == [7]
    assert threading.active_count() == before
