"""A state that takes DELAY seconds to walk (an object that pickles slowly): a pause whose safe
point comes in time is taken even when the walk outlasts the pause's deadline. With ``hold``, a
file that cannot travel is open too: the walk ends without a checkpoint, after the deadline,
and the pause is abandoned at once (the program runs on)."""

import os
import sys
import time


class SlowToSave:
    """Pickles as itself, after a wait."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __reduce__(self):
        time.sleep(self.delay)
        return (SlowToSave, (self.delay,))


slow = SlowToSave(float(sys.argv[1]))
fh = open(os.__file__) if "hold" in sys.argv[2:] else None  # outside the working directory
print("ready", flush=True)
total = 0
for i in range(300):
    total += i
    time.sleep(0.01)
if fh is not None:
    fh.close()
print("end", total, slow.delay)
