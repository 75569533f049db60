"""Output longer than the page's first read (64 kB), then a progress bar's frames and a
coloured word, then it fails: what a real training log ends with."""
import sys

for i in range(8000):
    print(f"line {i:05d} of the warm-up")
for pct in (0, 50, 100):
    sys.stdout.write(f"\rtraining: {pct:3d}%")
    sys.stdout.flush()
sys.stdout.write("\n")
print("\x1b[31mdiverged\x1b[0m at step 7")
raise SystemExit("loss is nan at step 7")
