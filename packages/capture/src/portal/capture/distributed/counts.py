"""How many collectives a rank has issued, per process group: what the ballot compares.

Each ``torch.distributed`` process group counts the collectives this rank issued on it
(``ProcessGroup._get_sequence_number_for_group``), counted when issued, before they complete,
and including those DDP's reducer issues from C++ on the autograd thread (its gradient
buckets' all-reduces), which no wrapper of the Python API sees. So the count needs no change to
the script: it is read from the groups themselves. torch is imported only by the caller: this
module reads the groups it is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from portal.capture.distributed.ballot import Count

__all__ = ["issued_counts"]


def issued_counts(groups: Iterable[Any]) -> Count:
    """The issued collectives of each group in ``groups`` (the default group first, then the
    others in the order the program made them), as the ballot's count."""
    return tuple(int(group._get_sequence_number_for_group()) for group in groups)
