"""The node's observer: named in its environment, loaded by name, never able to stop the job.

The simulated cloud's spot watch is the observer the product uses (its end-to-end test is
test_simulated_cloud's move off an outgrown spot machine); these tests hold the loading rules
for any other.
"""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from portal.node.observer import OBSERVER_ENV, load_observer

MODULE = "portal_test_observers"


class Recording:
    def __init__(self, plane: Any, job_id: str, environ: Any) -> None:
        self.seen: list[tuple[Any, ...]] = [("started", plane, job_id, environ[OBSERVER_ENV])]

    def checked(self, checked_bytes: int, *, partial: bool, pids: list[int]) -> object:
        self.seen.append(("checked", checked_bytes, partial, pids))
        return "decisions"

    def not_suspended(self, why: str) -> None:
        self.seen.append(("not_suspended", why))

    def suspended(self, checkpoint_id: str) -> object:
        self.seen.append(("suspended", checkpoint_id))
        return 2


class Broken(Recording):
    def checked(self, checked_bytes: int, *, partial: bool, pids: list[int]) -> object:
        raise RuntimeError("the observer's own bug")


def _declines(plane: Any, job_id: str, environ: Any) -> None:
    return None  # not this node's business (a machine that is not spot)


def _cannot_start(plane: Any, job_id: str, environ: Any) -> None:
    raise OSError("its records are unreadable")


@pytest.fixture(autouse=True)
def observers() -> Iterator[None]:
    module = types.ModuleType(MODULE)
    module.Recording = Recording  # type: ignore[attr-defined]
    module.Broken = Broken  # type: ignore[attr-defined]
    module.declines = _declines  # type: ignore[attr-defined]
    module.cannot_start = _cannot_start  # type: ignore[attr-defined]
    sys.modules[MODULE] = module
    yield
    del sys.modules[MODULE]


def test_the_named_observer_hears_the_attempt_in_order() -> None:
    observer = load_observer("plane", "j-1", {OBSERVER_ENV: f"{MODULE}:Recording"})
    assert observer.checked(123, partial=False, pids=[7]) == "decisions"
    observer.not_suspended("the pause was abandoned (deadline)")
    assert observer.suspended("c-9") == 2
    inner = observer._observer  # type: ignore[attr-defined]
    assert inner.seen == [
        ("started", "plane", "j-1", f"{MODULE}:Recording"),
        ("checked", 123, False, [7]),
        ("not_suspended", "the pause was abandoned (deadline)"),
        ("suspended", "c-9"),
    ]


@pytest.mark.parametrize(
    "environ", [{}, {OBSERVER_ENV: "  "}, {OBSERVER_ENV: f"{MODULE}:declines"}]
)
def test_no_observer_costs_nothing_and_answers_nothing(environ: dict[str, str]) -> None:
    observer = load_observer("plane", "j-1", environ)
    assert observer.checked(1, partial=True, pids=[]) is None
    assert observer.suspended("c-1") is None
    observer.not_suspended("why")


@pytest.mark.parametrize(
    ("name", "logged"),
    [
        ("portal_no_such_module:Watch", "No module named 'portal_no_such_module'"),
        (f"{MODULE}:Missing", "has no attribute 'Missing'"),
        (f"{MODULE}:cannot_start", "its records are unreadable"),
    ],
)
def test_an_observer_that_cannot_start_is_logged_and_the_job_runs_unobserved(
    name: str, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="portal.node"):
        observer = load_observer("plane", "j-1", {OBSERVER_ENV: name})
    assert observer.checked(1, partial=False, pids=[]) is None
    (record,) = caplog.records
    assert f"the node's observer {name} (PORTAL_NODE_OBSERVER) could not be started" in (
        record.getMessage()
    )
    assert logged in caplog.text


def test_an_observer_that_fails_is_logged_and_never_raises_into_the_node(
    caplog: pytest.LogCaptureFixture,
) -> None:
    observer = load_observer("plane", "j-1", {OBSERVER_ENV: f"{MODULE}:Broken"})
    with caplog.at_level(logging.ERROR, logger="portal.node"):
        assert observer.checked(5, partial=False, pids=[]) is None
    assert f"the node's observer {MODULE}:Broken failed in checked" in caplog.text
    assert "the observer's own bug" in caplog.text
    assert observer.suspended("c-2") == 2  # the rest still reaches it
