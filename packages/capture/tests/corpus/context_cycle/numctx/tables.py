"""Lookup tables read by the numbers' ``__hash__``: a plain list and a lazy one."""


class LazyMasks:
    """Masks past the table's end, made on demand (holds no state of its own)."""

    def __getitem__(self, n):
        return (1 << n) - 1


SMALL = [(1 << n) - 1 for n in range(64)]
MASKS = [LazyMasks(), SMALL]


def mix(digits, scaled):
    table = MASKS[1] if digits < 64 else MASKS[0]
    return hash((scaled & table[digits], digits))
