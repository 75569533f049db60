"""A module of the script's own that takes half a second to import."""
import time

print("slowmod: importing", flush=True)
time.sleep(0.5)
VALUE = 42
print("slowmod: imported", flush=True)
