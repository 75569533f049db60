"""Keeps a hashlib digest in a global across its pause points: a checkpoint cannot carry it."""
import hashlib
import time

digest = hashlib.sha256()


def train():
    for step in range(40):
        digest.update(b"step")
        print("step", step, flush=True)
        time.sleep(0.1)  # 4 s: long enough for a check on a loaded machine


train()
print("final", digest.hexdigest())
