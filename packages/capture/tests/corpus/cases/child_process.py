"""Holds a child process until a pause is wanted, then stops it so the pause can proceed."""
import subprocess
import sys
import time

from portal.runtime import rt

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("started child", flush=True)
waited = 0
while child is not None:
    if rt.pending():
        child.terminate()
        child.wait()
        child = None
        print("stopped child for the pause")
    else:
        time.sleep(0.01)
        waited += 1
        if waited > 3000:
            raise SystemExit("no pause came")
for i in range(40):
    time.sleep(0.005)
print("continuing")
print("end")
