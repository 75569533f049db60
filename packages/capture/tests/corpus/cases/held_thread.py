import os
import signal
import threading
import time

from portal.runtime import rt

state = {"worker": threading.Thread(target=time.sleep, args=(0.15,)), "n": 0}
state["worker"].start()
if rt.active:
    os.kill(os.getpid(), signal.SIGTERM)
while state["worker"].is_alive():
    state["n"] += 1
    time.sleep(0.01)
del state["worker"]
print("joined")
print("end")
for i in range(40):
    time.sleep(0.005)
print("tail done")
