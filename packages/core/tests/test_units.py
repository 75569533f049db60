"""One way to write each quantity: sizes, rates, clock times."""

from __future__ import annotations

import re
import time

from hypothesis import given
from hypothesis import strategies as st

from portal.core import units

SCALE = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15}


def test_sizes_as_the_spec_writes_them() -> None:
    assert units.size(12e9) == "12.0 GB"
    assert units.size(7_875_000_000) == "7.9 GB"
    assert units.size(512e6) == "512.0 MB"
    assert units.size(15_300) == "15.3 kB"
    assert units.size(999) == "999 B" and units.size(0) == "0 B"
    assert units.size(999_960) == "1.0 MB"  # never "1000.0 kB"
    assert units.rate(25e6) == "25.0 MB/s"


@given(st.integers(min_value=0, max_value=10**17))
def test_a_size_reads_back_within_its_rounding_and_below_a_thousand(n: int) -> None:
    number, unit = re.fullmatch(r"(\d+(?:\.\d)?) (B|kB|MB|GB|TB|PB)", units.size(n)).groups()  # type: ignore[union-attr]
    assert float(number) < 1000 or unit == "PB"
    assert abs(float(number) * SCALE[unit] - n) <= 0.05 * SCALE[unit] + 0.5


def test_a_clock_time_is_utc_and_says_so() -> None:
    at = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
    assert units.clock(at) == "22:13:20 UTC"
    assert units.clock(at) == time.strftime("%H:%M:%S UTC", time.gmtime(at))


def test_ages_in_one_unit_and_durations_in_two() -> None:
    from portal.core.units import age, ago, duration

    assert [age(s) for s in (0, 59, 60, 3599, 3600, 90_000)] == [
        "0s",
        "59s",
        "1m",
        "59m",
        "1h",
        "1d",
    ]
    assert [duration(s) for s in (0, 45, 750, 3600, 5400, 5401, 200_000)] == [
        "0s",
        "45s",
        "12m30s",
        "1h",
        "1h30m",
        "1h30m",
        "2d7h",
    ]
    assert ago(30) == "less than a minute ago" and ago(60) == "1 minute ago"
    assert ago(7200) == "2 hours ago"
