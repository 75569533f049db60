"""A job whose state takes about two seconds to save from step 10: an object that pickles slowly
(a stand-in for a state too big for its notice, without depending on this machine's disk speed)."""

import time


class SlowToSave:
    """Pickles as itself, after a wait: a checkpoint holding it is written late."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __reduce__(self):
        time.sleep(self.delay)
        return (SlowToSave, (self.delay,))


held = None
for step in range(300):
    if step == 10:
        held = SlowToSave(2.0)
    print(f"step {step}", flush=True)
    time.sleep(0.05)
print("final", held.delay)
