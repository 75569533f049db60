"""Installs signal handlers of its own, then signals itself step by step: a resumed run must
print what an uninterrupted one prints (its handlers, SIGTERM's included, still in place)."""
import os
import signal
import sys
import time

counts = {"usr2": 0, "hup": 0, "term": 0}


def on_usr2(signum, frame):
    counts["usr2"] += 1


class Terminator:
    def __init__(self, label):
        self.label = label

    def __call__(self, signum, frame):
        counts["term"] += 1
        print(self.label, "got", signal.Signals(signum).name, flush=True)


signal.signal(signal.SIGUSR2, on_usr2)
signal.signal(signal.SIGHUP, lambda signum, frame: counts.__setitem__("hup", counts["hup"] + 1))
signal.signal(signal.SIGINT, signal.SIG_IGN)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
for step in range(steps):
    if step == 5:
        signal.signal(signal.SIGTERM, Terminator("own handler"))
    os.kill(os.getpid(), signal.SIGUSR2)
    if step % 2:
        os.kill(os.getpid(), signal.SIGHUP)
    os.kill(os.getpid(), signal.SIGINT)  # ignored
    if step > 5 and step % 10 == 0:
        os.kill(os.getpid(), signal.SIGTERM)  # the program's own handler, not a pause
    print(step, counts, signal.getsignal(signal.SIGINT), flush=True)
    time.sleep(0.02)
print("end", counts)
