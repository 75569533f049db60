"""A training script's files: metadata read at module level with ``with open`` (a closed ``f``
stays in the globals), a log opened once and written every step (block-buffered: most of it sits
in the buffer at any moment), and a checkpoint written each epoch inside ``with open(p, "wb")``
in a function, piece by piece (a pause can come with it open halfway). Prints each step and, at
the end, the files; a run paused and resumed anywhere (in a new directory too) must print and
leave the same."""
import hashlib
import os
import pickle
import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60

if not os.path.exists("meta.pkl"):
    with open("meta.pkl", "wb") as f:
        pickle.dump({"name": "tiny", "width": 6}, f)
with open("meta.pkl", "rb") as f:
    meta = pickle.load(f)

log = open("train.log", "a")
log.write(f"start {meta['name']}\n")


def save(epoch, weights):
    with open(f"ckpt_{epoch % 3}.bin", "wb") as f:
        f.write(b"HEAD")
        time.sleep(0.004)
        for w in weights:
            f.write(w.to_bytes(4, "little"))
            time.sleep(0.001)
        f.write(b"TAIL")
    return f


weights = list(range(meta["width"]))
saved = None
for step in range(steps):
    weights = [(w * 31 + step) % 65521 for w in weights]
    log.write(f"step {step} loss {sum(weights) % 997}\n")
    print(step, f.closed, f.name, f.mode, flush=True)
    if step % 5 == 4:
        saved = save(step // 5, weights)
        print("saved", saved.name, saved.closed, flush=True)
    time.sleep(0.008)

log.write("done\n")
log.close()
for name in sorted(os.listdir(".")):
    if name.endswith((".bin", ".log", ".pkl")):
        with open(name, "rb") as fh:
            print(name, hashlib.sha256(fh.read()).hexdigest()[:16])
