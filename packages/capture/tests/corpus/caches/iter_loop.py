"""itertools iterators partway through, advanced in a module-level loop: after a pause each goes
on from where it was, sharing what it shared (a tee's buffer, a groupby's current group)."""
import itertools
import operator
import sys
import time

counter = itertools.count(10, 2)
colors = itertools.cycle(["red", "green", "blue"])
chained = itertools.chain(range(3), "ab", itertools.repeat("r", 4), range(100, 200))
sliced = itertools.islice(itertools.count(), 5, None, 7)
grid = itertools.product("xyz", range(20))
perms = itertools.permutations(range(5), 3)
combos = itertools.combinations("abcdefgh", 3)
cwr = itertools.combinations_with_replacement("abcdef", 3)
running = itertools.accumulate(itertools.count(1), operator.mul)
zipped = itertools.zip_longest(range(60), "abcdefg", fillvalue="-")
starred = itertools.starmap(pow, zip(itertools.count(2), itertools.cycle([2, 3])))
masked = itertools.compress(itertools.count(), itertools.cycle([1, 0, 0, 1]))
dropped = itertools.dropwhile(lambda v: v < 7, itertools.count())
taken = itertools.takewhile(lambda v: v < 40, itertools.count(0, 3))
odd = itertools.filterfalse(lambda v: v % 2 == 0, itertools.count())
pairs = itertools.pairwise(itertools.count(0, 5))
lead, lag = itertools.tee(itertools.count(1000), 2)
groups = itertools.groupby(itertools.cycle("aaabbc"))
group_key, group = next(groups)
batches = itertools.batched(itertools.count(), 3) if sys.version_info >= (3, 12) else None
seq = [counter, colors, chained, sliced, grid, perms, combos, cwr, running, zipped, starred,
       masked, dropped, taken, odd, pairs]

for step in range(45):
    row = []
    for it in seq:
        row.append(next(it, "done"))
    row.append(next(lead))
    if step % 3 == 0:
        row.append((next(lag), next(lag)))
    item = next(group, None)
    if item is None:
        group_key, group = next(groups)
        item = next(group)
    row.append((group_key, item))
    if batches is not None:
        row.append(next(batches))
    print(step, row, flush=True)
    time.sleep(0.012)
print("end", next(counter), next(colors), next(lag), next(lead), list(itertools.islice(seq[2], 3)))
