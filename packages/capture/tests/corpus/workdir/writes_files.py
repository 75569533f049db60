"""Writes and appends files in its working directory, step by step, then lists them: a run
paused and resumed in a fresh directory must leave the same files and print the same."""
import hashlib
import os
import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
os.makedirs("out/deep", exist_ok=True)
os.makedirs("empty", exist_ok=True)


def listing():
    rows = []
    for top, dirs, files in os.walk("."):
        dirs[:] = sorted(d for d in dirs if d not in ("cache", "__pycache__"))
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            path = os.path.join(top, name)
            if os.path.islink(path):
                rows.append(f"{path} -> {os.readlink(path)}")
            else:
                with open(path, "rb") as fh:
                    rows.append(f"{path} {hashlib.sha256(fh.read()).hexdigest()[:16]}")
        for name in sorted(dirs):
            if not os.listdir(os.path.join(top, name)):
                rows.append(f"{os.path.join(top, name)}/ (empty)")
    return rows


def write(path, data, mode):
    with open(path, mode) as fh:  # no open file stays in the state: a pause can come anywhere
        fh.write(data)


def lines(path):
    with open(path) as fh:
        return len(fh.read().splitlines())


for step in range(steps):
    write("log.txt", f"step {step}\n", "a")
    write(f"out/part{step % 3}.bin", bytes([step % 251]) * 40000, "ab")  # past 64 KiB: out of band
    write("out/deep/latest.txt", str(step), "w")
    os.makedirs("cache", exist_ok=True)  # .portalignore: not carried, made again
    write("cache/seen.txt", f"{step}\n", "a")
    if step == 1:
        os.symlink("out/deep/latest.txt", "latest")
    print(step, lines("log.txt"), os.path.getsize("out/part0.bin"), flush=True)
    time.sleep(0.01)

print("\n".join(listing()))
