"""Unlocked locks (re-created unlocked, with the threading objects built on them),
``threading.local`` (the program thread's values) and ``struct.Struct`` (by its format, its bound
methods with it): carried by the checkpoint pickler
(unit round-trips) and through real pauses (end to end); a lock held at the pause defers it,
named."""

from __future__ import annotations

import pickle
import queue
import random
import shutil
import struct
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _harness import CORPUS, EXIT_PAUSED, paused_at_least_once, plain_run, run_chain, runtime

from portal.capture._plugins import load_reducers
from portal.capture.image import read_image
from portal.capture.pickler import dumps, resolve_reducers

USER = "portal_test_locks_user_module"
HELD = "it is a lock held at the pause"


@pytest.fixture(scope="module")
def user() -> Iterator[types.ModuleType]:
    """A user namespace: its classes travel by value, class attributes included."""
    module = types.ModuleType(USER)
    exec(
        """
import threading

class Lexer:
    _lock = threading.Lock()
    _default = None
""",
        module.__dict__,
    )
    sys.modules[USER] = module
    yield module
    del sys.modules[USER]


def dumped(obj: Any, user: types.ModuleType) -> tuple[bytes, list[Any]]:
    reducers = resolve_reducers(load_reducers())
    data, buffers, _ = dumps(obj, namespaces={id(user.__dict__): USER}, reducers=reducers)
    return data, buffers


def round_trip(obj: Any, user: types.ModuleType) -> Any:
    data, buffers = dumped(obj, user)
    return pickle.loads(data, buffers=buffers)


def refusal(obj: Any, user: types.ModuleType) -> str:
    with pytest.raises(TypeError) as info:
        dumped(obj, user)
    return str(info.value)


# -- locks ------------------------------------------------------------------------------------


def test_unlocked_locks_come_back_new_unlocked_and_shared(user: types.ModuleType) -> None:
    lock, rlock = threading.Lock(), threading.RLock()
    back = round_trip({"a": lock, "b": lock, "r": rlock, "bound": lock.acquire}, user)
    assert back["a"] is back["b"] and back["a"] is not lock
    assert type(back["a"]) is type(lock) and type(back["r"]) is type(rlock)
    assert not back["a"].locked()
    assert back["bound"].__self__ is back["a"]  # a bound method: the same new lock
    assert back["bound"](blocking=False) and back["a"].locked()
    assert back["r"].acquire(blocking=False) and back["r"].acquire(blocking=False)  # reentrant
    assert not lock.locked() and rlock.acquire(blocking=False)  # the originals are untouched
    rlock.release()


def test_a_lock_held_at_the_pause_is_refused_by_name(user: types.ModuleType) -> None:
    lock = threading.Lock()
    with lock:
        message = refusal([lock], user)
    assert message.startswith("cannot pickle '_thread.lock' object: " + HELD)
    assert not lock.locked()


def test_an_rlock_held_here_or_by_another_thread_is_refused(user: types.ModuleType) -> None:
    rlock = threading.RLock()
    with rlock:
        assert HELD in refusal(rlock, user)
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with rlock:
            taken.set()
            done.wait(10)

    worker = threading.Thread(target=hold)
    worker.start()
    try:
        assert taken.wait(10)
        assert refusal(rlock, user).startswith(f"cannot pickle '_thread.RLock' object: {HELD}")
    finally:
        done.set()
        worker.join()
    assert round_trip(rlock, user).acquire(blocking=False)  # let go of: it travels


def test_threading_objects_built_on_unlocked_locks_keep_their_state(
    user: types.ModuleType,
) -> None:
    ev_set, ev_clear = threading.Event(), threading.Event()
    ev_set.set()
    sem = threading.BoundedSemaphore(3)
    sem.acquire()
    cond = threading.Condition(threading.Lock())
    rcond = threading.Condition()
    barrier = threading.Barrier(1)
    jobs: queue.Queue[int] = queue.Queue(maxsize=5)
    jobs.put(1)
    jobs.put(2)
    back = round_trip((ev_set, ev_clear, sem, cond, rcond, barrier, jobs), user)
    ev_set2, ev_clear2, sem2, cond2, rcond2, barrier2, jobs2 = back
    assert ev_set2.is_set() and not ev_clear2.is_set() and ev_set2.wait(0)
    assert sem2.acquire(blocking=False) and sem2.acquire(blocking=False)
    assert not sem2.acquire(blocking=False)  # two of three were left
    sem2.release()
    sem2.release()
    sem2.release()
    with pytest.raises(ValueError):
        sem2.release()  # still bounded at 3
    with cond2:
        cond2.notify_all()
        assert not cond2.wait(0.01)
    with rcond2, rcond2:  # an RLock underneath, reentrant
        rcond2.notify()
    assert barrier2.wait(1) == 0
    assert [jobs2.get_nowait(), jobs2.get_nowait()] == [1, 2] and jobs2.maxsize == 5
    jobs2.put(3)
    assert jobs2.get(timeout=1) == 3


def test_an_event_another_thread_waits_on_is_refused(user: types.ModuleType) -> None:
    """The waiting thread does not travel (nothing makes it again): the event is refused,
    naming the thread and the way out (``portal.runtime.remake``)."""
    event = threading.Event()
    waiter = threading.Thread(target=event.wait, args=(10,), name="waiter")
    waiter.start()
    try:
        while not event._cond._waiters:  # type: ignore[attr-defined]
            threading.Event().wait(0.005)
        message = refusal(event, user)
        assert "thread 'waiter' waits on it" in message and "portal.runtime.remake" in message
    finally:
        event.set()
        waiter.join()
    assert round_trip(event, user).is_set()


# -- threading.local --------------------------------------------------------------------------


def test_a_thread_local_travels_with_this_threads_values(user: types.ModuleType) -> None:
    """mpmath's ``local = threading.local()`` caches: the values the program's thread set come
    back, for the thread that goes on; another thread starts with none, as it would have."""
    local, empty = threading.local(), threading.local()
    local.cache = {"pi": 3.14}
    local.prec = 53
    back, again, empty2 = round_trip((local, local, empty), user)
    assert back is again and type(back) is threading.local and back is not local
    assert (back.cache, back.prec, vars(empty2)) == ({"pi": 3.14}, 53, {})
    seen: list[bool] = []
    worker = threading.Thread(target=lambda: seen.append(hasattr(back, "cache")))
    worker.start()
    worker.join()
    assert seen == [False]


def test_a_thread_local_subclass_is_refused_by_name(user: types.ModuleType) -> None:
    class Context(threading.local):
        def __init__(self, prec: int) -> None:
            self.prec = prec

    assert "a subclass of threading.local cannot be carried" in refusal(Context(53), user)


# -- struct.Struct ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [">B", "<HIq", "@3s2xd?", "!"])
def test_a_struct_and_its_bound_methods_travel_by_format(user: types.ModuleType, fmt: str) -> None:
    s = struct.Struct(fmt)
    back = round_trip({"s": s, "pack": s.pack, "unpack": s.unpack_from}, user)
    s2 = back["s"]
    assert type(s2) is struct.Struct and s2 is not s
    assert (s2.format, s2.size) == (s.format, s.size)
    assert back["pack"].__self__ is s2 and back["unpack"].__self__ is s2
    values = s.unpack(bytes(range(1, s.size + 1)))
    assert back["pack"](*values) == s.pack(*values)
    assert back["unpack"](s.pack(*values)) == values


def test_pyflates_int2byte_travels_alone(user: types.ModuleType) -> None:
    int2byte = round_trip(struct.Struct(">B").pack, user)
    assert int2byte(200) == b"\xc8"


def test_a_struct_subclass_is_refused_by_name(user: types.ModuleType) -> None:
    class Record(struct.Struct):
        pass

    assert "a subclass of struct.Struct cannot be carried" in refusal(Record("<i"), user)


# -- end to end -------------------------------------------------------------------------------


@pytest.fixture
def locks_dir(tmp_path: Path) -> Path:
    target = tmp_path / "locks"
    shutil.copytree(CORPUS / "locks", target)
    return target


def test_a_paused_program_goes_on_as_if_never_paused(locks_dir: Path, rng: random.Random) -> None:
    script = locks_dir / "lock_loop.py"
    plain = plain_run(script)
    assert plain.returncode == 0, plain.stderr.decode()
    chains = [run_chain(script, rng, max_delay=0.8) for _ in range(3)]
    chains = paused_at_least_once(chains, lambda: run_chain(script, rng, max_delay=0))
    for chain in chains:
        assert chain.segments[-1].rc == 0, chain.stderr.decode()
        assert b"portal:" not in chain.stderr, chain.stderr.decode()
        assert chain.stdout == plain.stdout


def test_a_lock_held_at_the_pause_defers_it_until_released(scripts: Path) -> None:
    script = scripts / "held_lock.py"
    ckpt = script.with_suffix(".portal")
    first = subprocess.run(
        runtime("run", "--checkpoint", str(ckpt), str(script)),
        capture_output=True,
        cwd=scripts,
        timeout=60,
        check=False,
    )
    assert first.returncode == EXIT_PAUSED, first.stderr.decode()
    header = read_image(ckpt).header
    # Named where the pause met it first: the ``with`` block's exit method, or the global.
    found = next(p for p in header.problems if p.type_name == "_thread.lock")
    assert found.kind == "value" and found.where.startswith("held_lock.py:"), found
    assert found.reason.startswith(f"TypeError: cannot pickle '_thread.lock' object: {HELD}")
    lines = script.read_text().splitlines()
    released = next(i for i, line in enumerate(lines, 1) if 'print("released")' in line)
    assert int(header.paused_at.split(":")[1].split()[0]) >= released, header.paused_at
    second = subprocess.run(
        runtime("resume", str(ckpt)), capture_output=True, cwd=scripts, timeout=60, check=False
    )
    plain = plain_run(script)
    assert (first.stdout + second.stdout, second.returncode) == (plain.stdout, 0)
    assert plain.stdout.endswith(b"tail done False\n")
