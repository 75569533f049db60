"""A pause asked for in the middle of a checkpoint check: pickling ``wire`` sends this process
SIGTERM (a notice) once, mid-walk. The pickling of ``wire`` and of ``after`` (which comes later
in the walk) is written to stderr with the script's line at that moment."""
import os
import signal
import sys
import time

fired = []


def _line():
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") != "__main__":
        frame = frame.f_back
    return frame.f_lineno if frame is not None else None


class Tripwire:
    def __getstate__(self):  # run by pickle as it takes the object's state
        print("wire reduced at line", _line(), file=sys.stderr, flush=True)
        if not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between two of these bytecodes
                pass
        return {}


class After:
    def __getstate__(self):
        print("after reduced at line", _line(), file=sys.stderr, flush=True)
        return {}


before = [[i] for i in range(1000)]
wire = Tripwire()
after = After()
total = 0
for step in range(int(sys.argv[1])):
    total += step
    print("step", step, total, flush=True)
    time.sleep(0.005)
print("final", total)
