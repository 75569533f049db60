"""Output as a progress bar draws it (frames ended by a carriage return, as tqdm redraws a line)
with a coloured word (a terminal's escape codes, as click and rich write them), and text of
two-byte characters at the end."""
import sys

for epoch in range(2):
    for pct in (0, 50, 100):
        sys.stdout.write(f"\repoch {epoch}: {pct:3d}%")
        sys.stdout.flush()
    sys.stdout.write("\n")
print("\x1b[1;32mpassed\x1b[0m \x1b]0;title\x07checks")
print("Grüße")
print("ü" * 50, flush=True)
