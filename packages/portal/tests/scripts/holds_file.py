"""Holds an open file in a global for a while: a pause must wait until it is closed. The file is
outside the job's working directory, so it cannot travel (one inside it would be reopened)."""
import os
import shutil
import tempfile
import time

where = tempfile.mkdtemp(prefix="portal-held-")
log = open(os.path.join(where, "held.txt"), "w")
for step in range(100):
    log.write(f"{step}\n")
    print("holding", step, flush=True)
    time.sleep(0.05)
log.close()
log = None
shutil.rmtree(where)
for step in range(100, 160):
    print("free", step, flush=True)
    time.sleep(0.05)
print("final")
