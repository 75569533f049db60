"""Driver (ours) for pyperformance's raytrace benchmark, copied next to it as bm_raytrace.py.

Renders frames of growing size; the benchmark writes each picture itself (``with open(...,
"wb")``) and the driver prints its digest. The pictures are compared as files too."""

import argparse
import hashlib

import bm_raytrace

parser = argparse.ArgumentParser()
parser.add_argument("--frames", type=int, default=10)
parser.add_argument("--size", type=int, default=90)
args = parser.parse_args()

for frame in range(args.frames):
    side = args.size + 4 * frame
    name = f"frame{frame}.ppm"
    bm_raytrace.bench_raytrace(1, side, side, name)
    with open(name, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    print(f"frame {frame} {side}x{side} sha256={digest}", flush=True)
