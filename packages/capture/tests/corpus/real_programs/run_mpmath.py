"""Driver (ours) for mpmath (pure-Python backend): evaluates constants, special functions,
integrals, sums and roots at growing working precision; the precision lives in mpmath's global
context (mp.dps), whose classes mpmath builds at import time."""

import argparse

from mpmath import mp, mpf

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=7)
args = parser.parse_args()

for r in range(args.rounds):
    mp.dps = 30 + 40 * r
    print(f"round {r} dps={mp.dps}")
    print(" pi", mp.pi)
    print(" e", mp.e)
    print(" zeta(3)", mp.zeta(3))
    print(" gamma(1/3)", mp.gamma(mpf(1) / 3))
    print(" quad sin 0..pi", mp.quad(mp.sin, [0, mp.pi]))
    print(" nsum 1/k^2", mp.nsum(lambda k: 1 / k**2, [1, mp.inf]))
    print(" findroot cos x = x", mp.findroot(lambda x: mp.cos(x) - x, 1))
    print(" besselj(0, 10)", mp.besselj(0, 10))
    print(" polylog(2, 1/2)", mp.polylog(2, mpf(1) / 2), flush=True)
