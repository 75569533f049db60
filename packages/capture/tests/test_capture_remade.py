"""Re-made objects (``portal.capture.remade``): what owns a thread or a process travels as what
made it and is made again, so that it continues. Unit round-trips through the checkpoint
pickler: the program's own registrations (``portal.runtime.remake``), conditions without their
waiting threads, a ``QueueListener``, thread pools and process pools, idle and busy."""

from __future__ import annotations

import concurrent.futures
import logging
import logging.handlers
import multiprocessing
import multiprocessing.pool
import pickle
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _harness import CORPUS, paused_against_plain

import portal.runtime
from portal.capture import remade
from portal.capture._plugins import load_reducers
from portal.capture.pickler import dumps, resolve_reducers
from portal.core.specs import WaitForSafePoint


def round_trip(obj: Any) -> Any:
    data, buffers, _ = dumps(obj, namespaces={}, reducers=resolve_reducers(load_reducers()))
    return pickle.loads(data, buffers=buffers)


def refusal(obj: Any) -> str:
    with pytest.raises(TypeError) as info:
        round_trip(obj)
    return str(info.value)


class LineWriter:
    """A class of the program's own with a worker thread draining a queue into a file, the
    shape of a metrics writer."""

    def __init__(self, path: str, prefix: str = "") -> None:
        self.path, self.prefix = path, prefix
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.flushes = 0
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while (line := self.queue.get()) is not None:
            with open(self.path, "a") as f:
                f.write(self.prefix + line + "\n")
            self.queue.task_done()
        self.queue.task_done()

    def write(self, line: str) -> None:
        self.queue.put(line)

    def flush(self) -> None:
        self.flushes += 1
        self.queue.join()

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[LineWriter]:
    w = LineWriter(str(tmp_path / "lines.txt"), prefix="> ")
    yield w
    w.close()


def test_an_object_with_a_worker_thread_is_refused_naming_remake(writer: LineWriter) -> None:
    message = refusal(writer)  # its queue (the thread waits on it) or its thread, named
    assert "Thread" in message and "portal.runtime.remake(obj, factory, *args)" in message
    assert "a lock held at the pause" not in message  # the old advice, which was wrong


def test_a_registered_object_is_made_again_by_its_class_and_continues(
    writer: LineWriter, tmp_path: Path
) -> None:
    writer.write("one")
    same = portal.runtime.remake(
        writer, LineWriter, writer.path, prefix="> ", quiesce=LineWriter.flush
    )
    assert same is writer
    back = round_trip({"w": writer, "again": writer, "write": writer.write})
    assert writer.flushes == 1  # quiesced: "one" is in the file before the checkpoint
    assert (tmp_path / "lines.txt").read_text() == "> one\n"
    new = back["w"]
    assert back["again"] is new and back["write"].__self__ is new and type(new) is LineWriter
    assert new.thread is not writer.thread and new.thread.is_alive()
    back["write"]("two")
    new.flush()
    assert (tmp_path / "lines.txt").read_text() == "> one\n> two\n"
    new.close()


def test_a_registration_leaves_with_its_object(tmp_path: Path) -> None:
    w = LineWriter(str(tmp_path / "x.txt"))
    portal.runtime.remake(w, LineWriter, w.path)
    assert remade.recipe_of(w) is not None and LineWriter in remade.registered_types()
    w.close()
    del w
    assert LineWriter not in remade.registered_types()


def test_another_factory_gives_the_object_its_attributes(writer: LineWriter) -> None:
    def reopen(path: str) -> LineWriter:
        return LineWriter(path, prefix="+ ")

    portal.runtime.remake(writer, reopen, writer.path)
    new = round_trip(writer)
    assert new.prefix == "+ " and new.thread.is_alive()
    new.write("x")
    new.flush()
    assert Path(writer.path).read_text() == "+ x\n"
    new.close()


def test_bad_registrations_are_refused_naming_the_argument(writer: LineWriter) -> None:
    with pytest.raises(TypeError, match="factory must be callable"):
        portal.runtime.remake(writer, "LineWriter")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="quiesce must be callable"):
        portal.runtime.remake(writer, LineWriter, quiesce="flush")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="no __dict__"):
        portal.runtime.remake(threading.Lock(), dict)


# -- conditions and queues --------------------------------------------------------------------


def _waited_on(q: queue.Queue[Any]) -> None:
    while not q.not_empty._waiters:  # type: ignore[attr-defined]
        time.sleep(0.001)


def test_a_queue_its_remade_consumer_waits_on_travels_without_the_waiter(
    writer: LineWriter,
) -> None:
    portal.runtime.remake(writer, LineWriter, writer.path)
    writer.queue.maxsize = 10
    _waited_on(writer.queue)
    back = round_trip(writer.queue)  # refused before: the waiter's lock is held
    assert back.maxsize == 10 and back.empty() and not back.not_empty._waiters
    assert back.not_empty._lock is back.mutex and back.not_full._lock is back.mutex
    back.put("x")
    assert back.get_nowait() == "x"


def test_a_queue_or_event_a_lone_thread_waits_on_is_refused_naming_the_thread() -> None:
    """Nothing makes that thread again: carried without it, its work would be lost."""
    q: queue.Queue[int] = queue.Queue()
    event = threading.Event()
    got: list[int] = []
    consumer = threading.Thread(target=lambda: got.append(q.get()), name="consumer")
    waiter = threading.Thread(target=event.wait, name="waiter")
    consumer.start()
    waiter.start()
    _waited_on(q)
    while not event._cond._waiters:  # type: ignore[attr-defined]
        time.sleep(0.001)
    for value, name in ((q, "consumer"), (event, "waiter")):
        message = refusal(value)
        assert f"thread {name!r} waits on it" in message, message
        assert "portal.runtime.remake(obj, factory, *args)" in message
    q.put(1)
    event.set()
    consumer.join()
    waiter.join()
    assert got == [1] and round_trip(event).is_set() and round_trip(q).empty()


# -- logging's QueueListener ------------------------------------------------------------------


def test_a_queue_listener_hands_on_every_record_and_runs_again(tmp_path: Path) -> None:
    q: queue.Queue[logging.LogRecord] = queue.Queue()
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Collect()
    listener = logging.handlers.QueueListener(q, handler, respect_handler_level=True)
    listener.start()
    queue_handler = logging.handlers.QueueHandler(q)
    for i in range(50):
        queue_handler.handle(logging.makeLogRecord({"msg": f"r{i}", "levelno": 20}))
    back = round_trip({"listener": listener, "queue": q})
    assert seen == [f"r{i}" for i in range(50)]  # handled before the checkpoint
    assert listener._thread is not None  # the original runs on (a periodic checkpoint)
    new = back["listener"]
    assert new.queue is back["queue"] and new.respect_handler_level
    assert new._thread is not None and new._thread.is_alive()
    back["queue"].put(logging.makeLogRecord({"msg": "after", "levelno": 20}))
    new.stop()
    assert len(new.handlers) == 1 and seen[-1] != "after"  # the handler is a copy: its own list
    listener.stop()


# -- thread pools -----------------------------------------------------------------------------


def test_an_idle_thread_pool_is_made_again_with_its_arguments() -> None:
    names: list[str] = []
    with concurrent.futures.ThreadPoolExecutor(3, "trainer", names.append, ("init",)) as pool:
        done = pool.submit(pow, 2, 10)
        assert done.result() == 1024
        deadline = time.monotonic() + 10
        while pool._idle_semaphore._value < len(pool._threads) and time.monotonic() < deadline:
            time.sleep(0.001)
        back = round_trip({"pool": pool, "done": done, "names": names})
    new = back["pool"]
    assert back["done"].result() == 1024
    assert new._max_workers == 3 and new._thread_name_prefix == "trainer"
    assert new.submit(threading.current_thread).result().name.startswith("trainer_")
    assert back["names"] == ["init", "init"]  # the new pool's worker ran the initializer
    new.shutdown()
    closed = round_trip(pool)  # one shut down comes back shut down
    with pytest.raises(RuntimeError):
        closed.submit(pow, 2, 2)


def test_a_busy_thread_pool_or_a_pending_future_waits_for_a_later_line() -> None:
    gate = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(gate.wait)
        for value in (pool, future):
            with pytest.raises(WaitForSafePoint) as info:
                round_trip(value)
            assert info.value.ready is not None and not info.value.ready()
        gate.set()
        future.result()


# -- process pools ----------------------------------------------------------------------------


def _square(x: int) -> int:
    return x * x


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_an_idle_pool_is_made_again_and_its_results_travel(kind: str) -> None:
    if kind == "process":
        pool: Any = multiprocessing.get_context("fork").Pool(2, maxtasksperchild=5)
    else:
        pool = multiprocessing.pool.ThreadPool(2)
    with pool:
        ready = pool.apply_async(_square, (7,))
        assert ready.get(timeout=30) == 49
        back = round_trip({"pool": pool, "ready": ready})
        new = back["pool"]
        with new:
            assert back["ready"].get(timeout=1) == 49 and back["ready"].successful()
            assert new.map(_square, range(5)) == [0, 1, 4, 9, 16]
            assert new._processes == 2 and type(new) is type(pool)
            if kind == "process":
                assert new._maxtasksperchild == 5 and new._ctx.get_start_method() == "fork"


def test_a_pool_with_tasks_in_flight_waits_and_a_closed_one_is_refused() -> None:
    with multiprocessing.pool.ThreadPool(1) as pool:
        gate = threading.Event()
        pending = pool.apply_async(gate.wait)
        with pytest.raises(WaitForSafePoint, match=r"1 task\(s\) in flight"):
            round_trip(pending)
        gate.set()
        pending.get(timeout=30)
        pool.close()
        assert "closed or terminated" in refusal(pool)


# -- end to end -------------------------------------------------------------------------------


@pytest.mark.parametrize("at_step", [3, 17])
def test_a_job_holding_threads_and_a_process_pool_pauses_and_continues(
    tmp_path: Path, at_step: int
) -> None:
    """A metrics writer of the script's own (registered with ``remake``), a ``QueueListener``
    writing a log file, a thread pool and a fork process pool, all used at each step: paused
    in the loop (they blocked every safe point before) and resumed in a new process, the
    output, the metrics file and the log file are an uninterrupted run's."""
    run = paused_against_plain(
        tmp_path,
        CORPUS / "workers" / "pipeline.py",
        ready=lambda out: out.count(b"step ") > at_step,
    )
    assert run.out == run.plain.stdout, run.err.decode()[-2000:]
    for name in ("metrics.txt", "events.log"):
        assert (run.job / name).read_text() == (run.plain_dir / name).read_text(), name
