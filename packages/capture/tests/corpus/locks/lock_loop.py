"""Unlocked locks (and the threading objects built on them), struct.Struct and its bound
methods, used in a module-level loop: after a pause each must be as if it never happened (same
sharing, same state: a set event stays set, a semaphore keeps its count, a queue its items, a
thread-local its values)."""

import queue
import struct
import threading
import time

from lexer_like import Lexer, int2byte

lock = threading.Lock()
rlock = threading.RLock()
cond = threading.Condition()
ready = threading.Event()
slots = threading.BoundedSemaphore(3)
tokens = threading.Semaphore(0)
jobs = queue.Queue()
header = struct.Struct("<HIq")
pack_header = header.pack
local = threading.local()
local.seen = []
same = {"a": lock, "b": lock, "c": Lexer._lock}

total = 0
for step in range(60):
    with lock:
        total += step
    with rlock, rlock:
        total += 1
    with cond:
        cond.notify_all()
    if step == 20:
        ready.set()
    with slots:
        total += slots._value
    tokens.release()
    if step % 2:
        tokens.acquire()
    jobs.put(step)
    if step % 3 == 2:
        total += jobs.get()
    data = pack_header(step, step * 3, -step) + int2byte(step % 256)
    total += sum(header.unpack(data[: header.size])) + data[-1]
    total += Lexer.get_default_instance().made
    local.seen.append(step % 7)
    local.last = step
    if step % 10 == 9:
        print(step, total, ready.is_set(), jobs.qsize(), flush=True)
    time.sleep(0.012)

print("locks", lock.locked(), same["a"] is same["b"] is lock, same["c"] is Lexer._lock)
print("acquire", lock.acquire(blocking=False), rlock.acquire(blocking=False), Lexer._lock.locked())
print("event", ready.is_set(), "semaphores", slots._value, tokens._value)
print("queue", jobs.qsize(), [jobs.get() for _ in range(jobs.qsize())])
print("struct", header.format, header.size, pack_header.__self__ is header, int2byte(7))
print("local", local.last, sum(local.seen), len(local.seen))
print("lexer", Lexer.get_default_instance() is Lexer._default, Lexer._default.made)
