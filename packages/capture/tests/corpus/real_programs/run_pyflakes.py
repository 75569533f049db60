"""Driver (ours) for pyflakes: runs its own command line, pyflakes.api.main, on the files named
on ours (it exits 1 when it reported anything, as the ``pyflakes`` command does)."""

import sys

from pyflakes.api import main

main(prog="pyflakes", args=sys.argv[1:])
