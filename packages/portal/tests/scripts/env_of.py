"""Prints whether each environment variable named on its command line is set in the job."""
import os
import sys

for name in sys.argv[1:]:
    print(name, "set" if name in os.environ else "unset")
