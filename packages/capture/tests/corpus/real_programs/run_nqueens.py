"""Driver (ours) for pyperformance's nqueens benchmark, copied next to it as bm_nqueens.py.

Solves N-queens by brute force through the benchmark's own pure-Python permutations()
generator and its n_queens() generator, board sizes one after another."""

import argparse

import bm_nqueens

parser = argparse.ArgumentParser()
parser.add_argument("--max", type=int, default=9)
parser.add_argument("--repeat", type=int, default=5)
args = parser.parse_args()

for attempt in range(args.repeat):
    for n in range(4, args.max + 1):
        solutions = list(bm_nqueens.n_queens(n))
        print(f"attempt {attempt} n={n}: {len(solutions)} solutions, first {solutions[:2]}",
              flush=True)
