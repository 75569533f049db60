"""Driver (ours) for pyperformance's pyflate benchmark, copied next to it as bm_pyflate.py with
its data/ folder.

Decompresses the benchmark's bzip2 archive with its pure-Python decoder, repeatedly: the
benchmark keeps the input file open in a local while it decodes (and checks the MD5 itself)."""

import argparse
import os

import bm_pyflate

parser = argparse.ArgumentParser()
parser.add_argument("--runs", type=int, default=10)
args = parser.parse_args()

path = os.path.join("data", "interpreter.tar.bz2")
for i in range(args.runs):
    bm_pyflate.bench_pyflake(1, path)  # raises on a wrong MD5
    print(f"run {i}: decoded {path}, md5 ok", flush=True)
