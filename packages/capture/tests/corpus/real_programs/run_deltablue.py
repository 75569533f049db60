"""Driver (ours) for pyperformance's deltablue benchmark, copied next to it as bm_deltablue.py.

The constraint solver rebinds the module-global ``planner`` (``global planner``) on every test;
its marks count on across runs."""

import argparse

import bm_deltablue

parser = argparse.ArgumentParser()
parser.add_argument("--runs", type=int, default=60)
parser.add_argument("--size", type=int, default=1500)
args = parser.parse_args()

for i in range(args.runs):
    bm_deltablue.delta_blue(args.size + i)
    print(f"run {i}: size={args.size + i} mark={bm_deltablue.planner.current_mark}", flush=True)
