"""``with app.run():`` (Modal's ephemeral app) and the run handle that never hides user methods."""

from __future__ import annotations

import time
from pathlib import Path

import bladekit_testapps as apps
import pytest

import bladekit
from bladekit.listing import runs


def test_runs_started_inside_are_stopped_at_the_end(tmp_path: Path, portal_home: Path) -> None:
    with apps.app.run() as running:
        assert running is apps.app
        counter = apps.Counter("ok", str(tmp_path / "c.pkl"))
        assert counter.bump.remote()[0] == 1
        call = apps.count_to.spawn(10_000, str(tmp_path / "s.pkl"), 0.01)
        time.sleep(0.5)
    with pytest.raises(bladekit.AppStoppedError, match=r"with app\.run"):
        call.get(timeout=20)
    assert "closed" in [e.kind for e in bladekit.run_of(counter).events]
    with pytest.raises(bladekit.ContainerExitedError, match="closed"):
        counter.bump.remote()
    states = {row.function: row.state for row in runs(portal_home)}
    assert states == {"Counter": "done", "count_to": "failed"}


def test_detach_lets_runs_finish_and_calls_outside_still_work(tmp_path: Path) -> None:
    with apps.app.run(detach=True):
        call = apps.add.spawn(1, 2)
    assert call.get(timeout=30) == 3
    assert apps.add.remote(2, 2) == 4  # no block at all: as before


def test_a_second_block_is_refused() -> None:
    with (
        apps.app.run(),
        pytest.raises(bladekit.InvalidArgumentError, match="already running"),
        apps.app.run(),
    ):
        pass


def test_a_class_may_define_run_and_close() -> None:
    app = bladekit.app("own-run")

    @app.cls()
    class Job:
        @app.method()
        def run(self, what: str) -> str:
            return f"ran {what}"

        @app.method()
        def close(self) -> str:
            return "mine"

    with Job() as job:
        assert job.run.remote("x") == "ran x"
        assert job.close.remote() == "mine"
        handle = bladekit.run_of(job)
        assert handle.attempt == 1 and handle.name.endswith("Job")
    assert "closed" in [e.kind for e in handle.events]


def test_the_old_run_attribute_is_a_deprecated_alias(tmp_path: Path) -> None:
    counter = apps.Counter("ok", str(tmp_path / "c.pkl"))
    with pytest.warns(DeprecationWarning, match=r"bladekit.run_of\(instance\)"):
        handle = counter.run
    assert handle is bladekit.run_of(counter)
    counter.close()


def test_a_plain_run_attribute_of_the_class_is_not_shadowed() -> None:
    app = bladekit.app("plain-run")

    @app.cls()
    class Plain:
        def run(self) -> None: ...

    with pytest.raises(AttributeError, match=r"no remote method 'run'"):
        Plain().run  # noqa: B018


def test_run_of_refuses_other_things() -> None:
    with pytest.raises(bladekit.InvalidArgumentError, match=r"instance of an @app\.cls"):
        bladekit.run_of(object())  # type: ignore[arg-type]


def test_get_with_a_timeout_says_what_did_not_finish() -> None:
    with apps.app.run():
        call = apps.nap.spawn(5)
        with pytest.raises(TimeoutError) as info:
            call.get(timeout=0.2)
        assert f"run {call.run.run_id} of nap did not finish within 0.2 s" in str(info.value)
        assert not call.done()
