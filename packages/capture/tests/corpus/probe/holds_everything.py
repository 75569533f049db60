"""Holds each kind of value a checkpoint cannot carry, in globals and in locals three calls
deep; checks, lets go of them all, checks again. Prints each check's problems as JSON."""

import hashlib
import json
import os
import socket
import threading
import time

from portal.capture import probe


_NO_MODULE = {}
exec("def numbers():\n    yield from range(10)\n", _NO_MODULE)


def counter():
    return _NO_MODULE["numbers"]()  # a generator whose globals are no module's namespace


def report(problems):
    print(json.dumps([[p.name, p.type_name, p.reason, p.where] for p in problems]), flush=True)


g_digest = hashlib.sha256()
g_sock = socket.socket()
g_lock = threading.Lock()
g_lock.acquire()  # held: an unlocked lock would travel (re-created)
g_thread = threading.Thread(target=time.sleep, args=(3600,), daemon=True)
g_thread.start()
g_file = open(os.__file__)  # noqa: SIM115 (outside the working directory: cannot travel)
g_gen = counter()
next(g_gen)


def level3():
    l3_sock = socket.socket()
    l3_gen = counter()
    next(l3_gen)
    report(probe())  # CHECK level3
    l3_sock.close()


def level2():
    l2_lock = threading.Lock()
    l2_lock.acquire()
    l2_file = open(os.__file__)  # noqa: SIM115
    level3()  # CALL level2
    l2_file.close()
    l2_lock.release()


def level1():
    l1_digest = hashlib.md5()  # noqa: F841
    l1_thread = threading.Thread(target=time.sleep, args=(3600,), daemon=True)
    l1_thread.start()
    level2()  # CALL level1


level1()
g_sock.close()
g_file.close()
del g_digest, g_sock, g_lock, g_thread, g_file, g_gen
report(probe())  # CHECK clear
