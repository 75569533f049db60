import os
import signal
import time

from portal.runtime import rt

_NO_MODULE = {}
exec("def numbers():\n    yield from range(10)\n", _NO_MODULE)
walker = _NO_MODULE["numbers"]()
next(walker)
if rt.active:
    os.kill(os.getpid(), signal.SIGTERM)
for i in range(5):
    print("holding", i)
    time.sleep(0.01)
walker = None
print("released")
print("after")
for i in range(40):
    time.sleep(0.005)
print("tail done")
