"""mpmath at a raised precision, written for the tests: the module's context and constants,
numbers, a complex number and a matrix carried across steps, the precision raised mid-run.
Paused anywhere and resumed, it must print what an uninterrupted run prints, digit for digit."""

import os
import time

from mpmath import mp, mpc, mpf, pi, quad, sin, zeta

mp.dps = 30
acc = mpf(0)
z = mpc(1, 2)
m = mp.matrix([[1, 2], [3, 4]])
for step in range(30):
    acc += quad(lambda x: sin(x) ** step, [0, pi]) + zeta(step + 2)
    z = z * mpc("0.9999", "0.0001")
    m = m * mpf("1.0001")
    print(step, mp.nstr(acc, 25), mp.nstr(z, 20), mp.nstr(m[0, 1], 20), flush=True)
    if step == 12:
        mp.dps = 40
    time.sleep(float(os.environ.get("STEP_SLEEP", "0.05")))
print("pi", pi, mp.dps, type(acc) is mp.mpf, type(m) is mp.matrix)
