from __future__ import annotations

import pytest
from policies_factories import C7I_LARGE, spot

from portal.core.errors import InvalidArgumentError
from portal.core.specs import PlacementContext
from portal.policies import EXCLUSION_S, PoolExclusions
from portal.policies.exclusions import EXCLUDED_UNTIL
from portal.testing import FakeClock


def test_a_reclaiming_pool_is_left_out_for_30_minutes(clock: FakeClock) -> None:
    offer = spot(C7I_LARGE)
    exclusions = PoolExclusions(clock)
    until = exclusions.reclaimed(offer)
    assert until == clock.now() + 1800 == clock.now() + EXCLUSION_S
    assert exclusions.excluded() == {offer.pool}
    clock.advance(1799)
    assert exclusions.until(offer) == until
    clock.advance(1)
    assert exclusions.excluded() == frozenset()
    assert exclusions.until(offer.pool) is None


def test_a_second_reclaim_extends_and_an_old_report_never_shortens(clock: FakeClock) -> None:
    exclusions = PoolExclusions(clock)
    first = exclusions.reclaimed("spot:aws:c7i.large:us-east-1")
    clock.advance(600)
    second = exclusions.reclaimed("spot:aws:c7i.large:us-east-1")
    assert second == first + 600
    assert exclusions.reclaimed("spot:aws:c7i.large:us-east-1", at=clock.now() - 900) == second


def test_apply_puts_pools_and_their_end_in_the_context(clock: FakeClock) -> None:
    exclusions = PoolExclusions(clock)
    until = exclusions.reclaimed("p1")
    context = exclusions.apply(PlacementContext(excluded_pools=frozenset({"p0"})))
    assert context.excluded_pools == {"p0", "p1"}
    assert context.settings[EXCLUDED_UNTIL] == {"p1": until}


def test_bad_inputs(clock: FakeClock) -> None:
    with pytest.raises(InvalidArgumentError, match="window must be above 0"):
        PoolExclusions(clock, window_s=0)
    with pytest.raises(InvalidArgumentError, match="needs the pool"):
        PoolExclusions(clock).reclaimed("")
