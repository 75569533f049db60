"""A loop over growing working precision on the package ``numctx`` (mpmath's shape, see its
docstring). It pauses itself (SIGTERM) at fixed steps; a constant must still be a constant after
a resume (printed at each later precision in full), and the caches keyed by constants must
still answer."""

import os
import signal

from numctx import Num, ctx

from portal.runtime import rt

PAUSE_AT = {3, 6, 9}
seen = []

for step in range(12):
    ctx.digits = 10 + 8 * step
    area = ctx.area(step % 4 + 1)
    half = Num(0.5) * ctx.pi
    seen.append(half)
    print(step, ctx.digits, ctx.pi._value, area, half, len(ctx.areas), flush=True)
    if rt.active and step in PAUSE_AT:
        os.kill(os.getpid(), signal.SIGTERM)  # pauses at the next line
print("areas", sorted((k[1], k[2], str(v)) for k, v in ctx.areas.items())[:3])
print("cached", ctx.area(1) is ctx.area(1), ctx.pi in {ctx.pi: 1}, type(ctx.pi).context is ctx)
print("constant", type(ctx.pi).__name__, ctx.pi.name)
print("seen", [str(v) for v in seen[:2]], seen[0] == seen[0])
