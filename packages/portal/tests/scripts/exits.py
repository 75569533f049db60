import sys

print("out line")
print("err line", file=sys.stderr)
mode = sys.argv[1]
if mode == "raise":
    raise RuntimeError("boom from the script")
sys.exit(int(mode))
