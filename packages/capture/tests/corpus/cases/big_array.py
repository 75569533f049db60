import os
import signal

import numpy as np

from portal.runtime import rt

arr = np.arange(2_000_000, dtype=np.float64)
if rt.active:
    os.kill(os.getpid(), signal.SIGTERM)
arr[0] = 42.0
print(arr[:3], arr.flags.writeable, float(arr.sum()))
