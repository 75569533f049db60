"""Driver (ours) for pyperformance's richards benchmark, copied next to it as bm_richards.py.

Runs the operating-system simulation repeatedly; its tasks reach the module-global
taskWorkArea (mutated in place) and the tracing flag through the module's globals."""

import argparse

import bm_richards

parser = argparse.ArgumentParser()
parser.add_argument("--runs", type=int, default=90)
args = parser.parse_args()

richards = bm_richards.Richards()
for i in range(args.runs):
    ok = richards.run(1)
    area = bm_richards.taskWorkArea
    print(f"run {i}: ok={ok} holdCount={area.holdCount} qpktCount={area.qpktCount}", flush=True)
