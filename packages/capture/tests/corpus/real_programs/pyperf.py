"""A stand-in for pyperf, which the test environments do not install.

pyperformance's benchmark modules import pyperf at module level; the drivers here call their
functions directly and need only its clock. Written for Portal's tests (not pyperf's code)."""

import time

perf_counter = time.perf_counter
