"""How the node reads its machine's facts from the sources that detected it: the source that
says how the machine was bought wins; a failing or hanging one never holds the job's start."""

from __future__ import annotations

import threading
import time

from portal.node.machine import machine_facts, purchase_of


class Source:
    def __init__(
        self,
        name: str,
        facts: dict[str, str | None] | None = None,
        *,
        delay: float = 0.0,
        error: Exception | None = None,
    ) -> None:
        self.name, self.facts, self.delay, self.error = name, facts, delay, error

    def machine_info(self) -> dict[str, str | None]:
        time.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return dict(self.facts or {})


class NoFacts:
    name = "local"


def test_the_source_that_says_how_the_machine_was_bought_wins() -> None:
    platform = Source("sigterm", {"provider": "linux", "capacity": None})
    aws = Source("aws", {"provider": "aws", "instance_type": "c7i.large", "capacity": "spot"})
    assert machine_facts([NoFacts(), platform, aws]) == aws.facts
    assert machine_facts([NoFacts(), platform]) == platform.facts
    assert machine_facts([NoFacts()]) is None


def test_a_failing_source_is_passed_over() -> None:
    broken = Source("gcp", error=OSError("metadata server unreachable"))
    azure = Source("azure", {"provider": "azure", "capacity": "on_demand"})
    assert machine_facts([broken, azure]) == azure.facts


def test_a_hanging_source_does_not_hold_the_start() -> None:
    hanging = Source("aws", {"capacity": "spot"}, delay=30)
    assert machine_facts([hanging], timeout_s=0.2) is None  # it answers only after 30 s
    assert any(t.name == "machine-facts" for t in threading.enumerate())  # left to finish


def test_purchase_models() -> None:
    assert purchase_of({"capacity": "spot"}) == "spot"
    assert purchase_of({"capacity": "on_demand"}) == "on-demand"
    assert purchase_of({"capacity": "reserved"}) == "on-demand"
    assert purchase_of({"capacity": None}) is None
    assert purchase_of(None) is None
