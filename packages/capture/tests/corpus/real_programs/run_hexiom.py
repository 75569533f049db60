"""Driver (ours) for pyperformance's hexiom benchmark, copied next to it as bm_hexiom.py.

Solves the benchmark's own Hexiom levels, printing each solution the solver writes to an
io.StringIO (the benchmark checks it against the expected one too)."""

import argparse
import io

import bm_hexiom

parser = argparse.ArgumentParser()
parser.add_argument("--levels", default="2,10,20,25,30")
parser.add_argument("--repeat", type=int, default=14)
args = parser.parse_args()

for level in [int(x) for x in args.levels.split(",")]:
    for attempt in range(args.repeat):
        board, expected = bm_hexiom.LEVELS[level]
        stream = io.StringIO()
        bm_hexiom.solve_file(board.strip(), bm_hexiom.Done.FIRST_STRATEGY,
                             bm_hexiom.DESCENDING, stream)
        output = "\n".join(line.rstrip() for line in stream.getvalue().splitlines())
        print(f"level {level} attempt {attempt}: solved={output == expected.rstrip()}")
        print(output, flush=True)
