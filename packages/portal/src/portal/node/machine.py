"""What the node learns of its machine from the notice sources that detected it.

A provider's notice source knows its machine (``machine_info()``: the metadata service says the
instance type, the region and zone, and whether it was bought spot or on demand). The purchase
model decides two things the spec ties to it: whether ``capture_probe = full`` may rehearse a
checkpoint here (never on a spot machine: a rehearsal's stall there could cost the notice) and
whether ``checkpoint_every = auto`` takes periodic checkpoints (every 30 minutes on spot, none
elsewhere). Without this, a real spot VM whose job was started with ``portal run`` counted as the
user's own on-demand machine.

The question is bounded in time: a metadata service that hangs must not hold the job's start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from portal.core.specs import DescribesMachine

__all__ = ["ASK_TIMEOUT_S", "machine_facts", "purchase_of"]

log = logging.getLogger("portal.node")

#: How long the node waits for the sources' answer before it starts the job without it.
ASK_TIMEOUT_S = 5.0


def machine_facts(
    sources: Sequence[Any], *, timeout_s: float = ASK_TIMEOUT_S
) -> dict[str, str | None] | None:
    """The first facts a source gives that say how the machine was bought (``capacity``), else
    the first it gives at all; None when no source answers in ``timeout_s``."""
    found: list[dict[str, str | None]] = []

    def ask() -> None:
        for source in sources:
            if not isinstance(source, DescribesMachine):
                continue
            try:
                facts = dict(source.machine_info())
            except Exception as exc:  # the job runs on: the facts are a refinement
                log.warning(
                    "notice source %s could not say what machine this is: %s",
                    getattr(source, "name", source),
                    exc,
                )
                continue
            found.append(facts)
            if facts.get("capacity"):
                return

    thread = threading.Thread(target=ask, name="machine-facts", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        log.warning("the notice sources did not say what machine this is in %g s", timeout_s)
    answers = list(found)
    told = [f for f in answers if f.get("capacity")]
    return (told or answers)[0] if answers else None


def purchase_of(facts: dict[str, str | None] | None) -> str | None:
    """``spot`` or ``on-demand`` from a source's facts; None when they do not say."""
    capacity = (facts or {}).get("capacity")
    if capacity == "spot":
        return "spot"
    if capacity in ("on_demand", "reserved"):
        return "on-demand"
    return None
