"""Reads files across a pause: a text file line by line in a ``for`` loop (UTF-8 with accents,
``\r\n`` and ``\n`` endings, larger than one read-ahead chunk), a binary file in odd-sized
pieces, a table patched in place through ``r+b``, and writes what it read to a text file opened
``w`` once. A run paused and resumed anywhere (in a new directory too) must print and leave the
same."""
import hashlib
import os
import sys
import time
import zlib

lines = int(sys.argv[1]) if len(sys.argv) > 1 else 400

if not os.path.exists("data.txt"):
    with open("data.txt", "w", encoding="utf-8", newline="") as out:
        for i in range(lines):
            end = "\r\n" if i % 3 == 0 else "\n"
            out.write(f"ligne {i} café {'é' * (i % 7)} {i * i}{end}")
    with open("table.bin", "wb") as out:
        out.write(bytes(256))

src = open("data.txt", encoding="utf-8")
upper = open("upper.txt", "w", encoding="utf-8")
table = open("table.bin", "r+b")
total = 0
for i, line in enumerate(src):
    upper.write(line.upper())
    total += len(line)
    table.seek(i % 256)
    byte = table.read(1)
    table.seek(-1, os.SEEK_CUR)
    table.write(bytes([(byte[0] + i) % 256]))
    if i % 40 == 0:
        print(i, total, repr(line), upper.tell(), flush=True)
    time.sleep(0.002)
src.close()
upper.close()

pieces = open("data.txt", "rb")
crc = 0  # (a hashlib object is the process's own: it would hold the pause)
n = 0
while True:
    chunk = pieces.read(37)
    if not chunk:
        break
    crc = zlib.crc32(chunk, crc)
    n += 1
    if n % 50 == 0:
        print("piece", n, pieces.tell(), flush=True)
    time.sleep(0.002)
pieces.close()
table.close()
print("pieces", n, crc, total)
for name in ("upper.txt", "table.bin"):
    with open(name, "rb") as fh:
        print(name, hashlib.sha256(fh.read()).hexdigest()[:16])
