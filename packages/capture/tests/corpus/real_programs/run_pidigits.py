"""Driver (ours) for pidigits: streams digits of pi and tau from its unbounded spigot
generators, printing them fifty a line as they come. The generators live in module globals
while the loop pulls from them."""

import argparse

import pidigits

parser = argparse.ArgumentParser()
parser.add_argument("--digits", type=int, default=12000)
args = parser.parse_args()

streams = {"pi": pidigits.piGenerator(), "tau": pidigits.tauGenerator()}
for name, digits in streams.items():
    line = []
    for i in range(args.digits):
        line.append(str(next(digits)))
        if len(line) == 50:
            print(f"{name} {i - 49:5d}: {''.join(line)}", flush=True)
            line = []
    if line:
        print(f"{name} {args.digits - len(line):5d}: {''.join(line)}")
