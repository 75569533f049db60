from __future__ import annotations

import pytest

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.testing import FakeClock


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock(start=100.0)
    assert isinstance(clock, Clock)
    assert clock.now() == 100.0 and clock.monotonic() == 0.0
    clock.sleep(5)
    clock.advance(1.5)
    assert clock.now() == 106.5 and clock.monotonic() == 6.5
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_system_clock() -> None:
    assert isinstance(SYSTEM_CLOCK, Clock)
    a = SYSTEM_CLOCK.monotonic()
    SYSTEM_CLOCK.sleep(0)
    assert SYSTEM_CLOCK.monotonic() >= a
    assert SYSTEM_CLOCK.now() > 1.6e9
