"""The notice-source contract fails a source whose ``poll`` returns at once with nothing (it
makes its caller's loop spin), and passes one that waits its timeout."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from portal.core.domain import Notice
from portal.testing import NoticeSourceContract


class _Source:
    name = "sample"

    def __init__(self, *, waits: bool) -> None:
        self.waits = waits

    def detect(self) -> bool:
        return True

    def poll(self, timeout_s: float) -> Sequence[Notice]:
        if self.waits:
            time.sleep(timeout_s)
        return []

    def close(self) -> None:
        pass


@pytest.mark.parametrize("waits", [True, False])
def test_a_source_that_does_not_wait_fails_the_contract(waits: bool) -> None:
    contract = NoticeSourceContract()
    source = _Source(waits=waits)
    if waits:
        contract.test_waits_its_timeout_when_nothing_changed(source)  # type: ignore[arg-type]
        return
    with pytest.raises(AssertionError, match="it must wait for a change up to its timeout"):
        contract.test_waits_its_timeout_when_nothing_changed(source)  # type: ignore[arg-type]
