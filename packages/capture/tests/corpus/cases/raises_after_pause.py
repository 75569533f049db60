import os
import signal
import sys

from portal.runtime import rt


def deep(n):
    if n == 0:
        if rt.active:
            os.kill(os.getpid(), signal.SIGTERM)
        print("at the bottom", file=sys.stderr)
        return {}["missing"]
    return deep(n - 1)


print("argv", sys.argv[1:], __name__, os.path.basename(__file__), os.path.basename(sys.path[0]))
deep(3)
