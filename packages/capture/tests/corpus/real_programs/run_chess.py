"""Driver (ours) for python-chess: plays seeded random games to their end (PGN and FEN
printed), then counts move-generation trees (perft) from well-known positions.

The move generators are the library's own generators; a game is a Board with its move stack."""

import argparse
import random

import chess
import chess.pgn

parser = argparse.ArgumentParser()
parser.add_argument("--games", type=int, default=200)
parser.add_argument("--depth", type=int, default=3)
parser.add_argument("--seed", type=int, default=7)
args = parser.parse_args()

rng = random.Random(args.seed)
for number in range(args.games):
    board = chess.Board()
    while not board.is_game_over() and board.ply() < 300:
        board.push(rng.choice(list(board.legal_moves)))
    game = chess.pgn.Game.from_board(board)
    game.headers["Event"] = f"random game {number}"
    print(game, end="\n\n")
    print(f"game {number}: {board.result()} after {board.ply()} plies; {board.fen()}", flush=True)


def perft(board, depth):
    if depth == 1:
        return board.legal_moves.count()
    nodes = 0
    for move in list(board.legal_moves):
        board.push(move)
        nodes += perft(board, depth - 1)
        board.pop()
    return nodes


POSITIONS = [
    chess.STARTING_FEN,
    "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1",
    "8/2p5/3p4/KP5r/1R3p1k/8/4P1P1/8 w - - 0 1",
]
for fen in POSITIONS:
    for depth in range(1, args.depth + 1):
        print(f"perft({depth}) of {fen}: {perft(chess.Board(fen), depth)}", flush=True)
