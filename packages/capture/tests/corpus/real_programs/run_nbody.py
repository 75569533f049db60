"""Driver (ours) for pyperformance's nbody benchmark, copied next to it as bm_nbody.py.

Integrates the solar system in rounds and prints the energy after each: the module's
SYSTEM/PAIRS lists share the bodies' coordinate lists with BODIES and with the functions'
default arguments, which a resumed run must keep shared."""

import argparse

import bm_nbody

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=60)
parser.add_argument("--steps", type=int, default=15000)
args = parser.parse_args()

bm_nbody.offset_momentum(bm_nbody.BODIES["sun"])
print(f"start energy {bm_nbody.report_energy():.17g}")
for r in range(args.rounds):
    bm_nbody.advance(0.01, args.steps)
    print(f"round {r} energy {bm_nbody.report_energy():.17g}", flush=True)
for name, (pos, vel, mass) in sorted(bm_nbody.BODIES.items()):
    print(name, " ".join(f"{x:.17g}" for x in [*pos, *vel, mass]))
