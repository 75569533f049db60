"""Pauses itself at fixed points (under Portal), so the second pause lands in resumed frames."""
import os
import signal

from portal.runtime import rt


def pause_here():
    if rt.active:
        os.kill(os.getpid(), signal.SIGTERM)


def inner(i, acc):
    local = [i]
    if i in (3, 6, 7):
        pause_here()
    local.append(i * 2)
    return acc + sum(local)


def outer(n):
    acc = 0
    for i in range(n):
        acc = inner(i, acc)
        print("i", i, acc)
    return acc


result = outer(10)
print("result", result)
