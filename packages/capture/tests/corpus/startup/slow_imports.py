"""Imports a slow module of its own first: a notice during that import pauses at the first line
after it."""
print("before the import", flush=True)
import slowmod

print("after the import", slowmod.VALUE, flush=True)
total = sum(range(10))
print("done", total)
