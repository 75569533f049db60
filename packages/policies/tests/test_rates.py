from __future__ import annotations

import json

import pytest

from portal.core.errors import InvalidArgumentError
from portal.policies import MachineClass, RateBook, RateTable, StorageRoute, bound_bytes, classify
from portal.policies.rates import _bundled_text


def test_every_bundled_row_says_where_it_came_from() -> None:
    data = json.loads(_bundled_text())
    assert data["formula"] == "bound_bytes = R x (notice_s - t0_s) x 0.5"
    for row in data["rows"]:
        assert row["source"].startswith("initial estimate"), row
        assert row["kind"] == "estimate" and row["date"]
        assert row["rate_mb_s"] > 0 and 0 <= row["t0_s"] < 30


def test_bundled_table_covers_each_provider_class_and_route() -> None:
    table = RateTable.bundled()
    for provider in ("aws", "gcp", "azure", "*"):
        for machine_class in MachineClass:
            for route in StorageRoute:
                assert (provider, machine_class, route) in table.rows


def test_the_specs_example_bound_is_about_7_9_gb() -> None:
    rate = RateBook().rate("aws", MachineClass.SMALL, StorageRoute.SAME_REGION)
    assert round(bound_bytes(rate.bytes_per_s, 120, rate.t0_s) / 1e9, 1) == 7.9


def test_larger_classes_save_faster_and_cross_region_is_slower() -> None:
    book = RateBook()
    for provider in ("aws", "gcp", "azure", "*"):
        rates = [book.rate(provider, c, StorageRoute.SAME_REGION).bytes_per_s for c in MachineClass]
        assert rates == sorted(rates)
        for c in MachineClass:
            same = book.rate(provider, c, StorageRoute.SAME_REGION).bytes_per_s
            assert book.rate(provider, c, StorageRoute.CROSS_REGION).bytes_per_s < same


def test_unknown_provider_falls_back_to_the_star_rows() -> None:
    book = RateBook()
    rate = book.rate("lambda", MachineClass.LARGE, StorageRoute.LOCAL_DISK)
    assert rate == book.rate("*", MachineClass.LARGE, StorageRoute.LOCAL_DISK)
    assert book.default_class("lambda") is MachineClass.SMALL


@pytest.mark.parametrize(
    ("vcpus", "expected"),
    [
        (1, "small"),
        (4, "small"),
        (5, "medium"),
        (16, "medium"),
        (17, "large"),
        (64, "large"),
        (65, "xlarge"),
        (192, "xlarge"),
    ],
)
def test_classes_by_vcpus(vcpus: int, expected: str) -> None:
    assert classify(vcpus) == expected


def test_classify_refuses_a_machine_without_vcpus() -> None:
    with pytest.raises(InvalidArgumentError, match="at least 1 vCPU"):
        classify(0)


def test_a_measured_rate_overrides_the_table_for_its_key_only() -> None:
    book = RateBook()
    before = book.rate("aws", MachineClass.MEDIUM, StorageRoute.SAME_REGION)
    book.record(
        provider="aws",
        machine_class="small",
        route="same_region",
        bytes_per_s=90e6,
        t0_s=8,
        source="measured by node n-1 saving job-3",
        date="2026-12-01",
    )
    got = book.rate("aws", MachineClass.SMALL, StorageRoute.SAME_REGION)
    assert (got.bytes_per_s, got.t0_s, got.measured) == (90e6, 8, True)
    assert book.rate("aws", MachineClass.MEDIUM, StorageRoute.SAME_REGION) == before
    assert book.rate("gcp", MachineClass.SMALL, StorageRoute.SAME_REGION).measured is False


def test_measured_rates_round_trip() -> None:
    book = RateBook()
    book.record(
        provider="gcp",
        machine_class="large",
        route="cross_region",
        bytes_per_s=2e8,
        t0_s=12,
        source="measured",
    )
    again = RateBook()
    again.record_all(book.measured())
    assert again.rate("gcp", MachineClass.LARGE, StorageRoute.CROSS_REGION) == book.rate(
        "gcp", MachineClass.LARGE, StorageRoute.CROSS_REGION
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bytes_per_s": 0.0}, "bytes_per_s must be above 0"),
        ({"bytes_per_s": -5.0}, "bytes_per_s must be above 0"),
        ({"t0_s": -1.0}, "t0_s must be 0 or more"),
        ({"machine_class": "huge"}, "unknown machine class 'huge'"),
        ({"route": "carrier-pigeon"}, "storage route 'carrier-pigeon'"),
        ({"provider": ""}, "needs the provider"),
    ],
)
def test_bad_measurements_are_refused(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "provider": "aws",
        "machine_class": "small",
        "route": "same_region",
        "bytes_per_s": 1e8,
        "t0_s": 10.0,
        "source": "test",
    }
    args.update(kwargs)
    with pytest.raises(InvalidArgumentError, match=message):
        RateBook().record(**args)  # type: ignore[arg-type]


def test_a_bounds_file_without_star_rows_is_refused() -> None:
    text = json.dumps(
        {
            "rows": [
                {
                    "provider": "aws",
                    "class": "small",
                    "route": "same_region",
                    "rate_mb_s": 100,
                    "t0_s": 10,
                    "source": "x",
                }
            ]
        }
    )
    with pytest.raises(InvalidArgumentError, match="no '\\*' rows"):
        RateTable.from_json(text)


def test_a_bad_row_is_named_by_its_position() -> None:
    text = json.dumps(
        {
            "rows": [
                {
                    "provider": "aws",
                    "class": "small",
                    "route": "same_region",
                    "rate_mb_s": -1,
                    "t0_s": 10,
                    "source": "x",
                }
            ]
        }
    )
    with pytest.raises(InvalidArgumentError, match="row 0 of bounds file"):
        RateTable.from_json(text)


def test_a_repeated_row_is_refused() -> None:
    row = {
        "provider": "aws",
        "class": "small",
        "route": "same_region",
        "rate_mb_s": 1,
        "t0_s": 1,
        "source": "x",
    }
    with pytest.raises(InvalidArgumentError, match="repeats aws small same_region"):
        RateTable.from_json(json.dumps({"rows": [row, row]}))


def test_not_a_bounds_file() -> None:
    with pytest.raises(InvalidArgumentError, match="is not a bounds file"):
        RateTable.from_json("[]", origin="my.json")
