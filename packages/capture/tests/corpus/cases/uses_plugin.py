import os
import signal

import portal_testplug

from portal.runtime import rt

handle = portal_testplug.Handle("db")
portal_testplug.COUNTER["n"] = 5
if rt.active:
    os.kill(os.getpid(), signal.SIGTERM)
print(handle.name, type(handle.lock).__name__, portal_testplug.COUNTER["n"])
