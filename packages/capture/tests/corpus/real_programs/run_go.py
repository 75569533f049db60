"""Driver (ours) for pyperformance's go benchmark, copied next to it as bm_go.py.

Monte-Carlo tree search games of the computer against itself, from the global ``random``
generator; the benchmark counts moves in module globals (``global TIMESTAMP, MOVES``)."""

import argparse
import random

import bm_go

parser = argparse.ArgumentParser()
parser.add_argument("--games", type=int, default=6)
parser.add_argument("--moves", type=int, default=10)
parser.add_argument("--playouts", type=int, default=120)
args = parser.parse_args()

bm_go.GAMES = args.playouts  # playouts per move (the benchmark's own knob)
for game in range(args.games):
    random.seed(game)
    board = bm_go.Board()
    for move in range(args.moves):
        pos = bm_go.computer_move(board)
        board.move(pos)
        where = "pass" if pos == bm_go.PASS else bm_go.to_xy(pos)
        print(f"game {game} move {move}: {where} (moves so far {bm_go.MOVES})", flush=True)
    print(board)
