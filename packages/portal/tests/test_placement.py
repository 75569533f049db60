"""Placement on the simulated cloud, in process: real SQLite control plane and machine records,
an injected clock, no node processes (the end-to-end runs are in test_simulated_cloud.py)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simcloud import CLOUD

from portal.control.plane import ControlPlane
from portal.control.store import JobStateConflictError
from portal.core.domain import CapacityClass, Decision, Job, Offer, Verdict
from portal.core.errors import InvalidArgumentError, InvalidSettingError
from portal.core.hookspecs import hookimpl
from portal.core.plugins import Plugins, get_plugin_manager
from portal.core.settings import Settings
from portal.core.specs import PlacementContext, PlacementPolicySpec, StateMeasure
from portal.jobs import Portal
from portal.policies import PlacementRequest, SimulatedCloud
from portal.policies import plugin as policies_plugin
from portal.sim.machines import SimulatedMachines, load_cloud
from portal.sim.outgrow import SpotWatch
from portal.sim.placing import SimulatedPlacing
from portal.testing import FakeClock

KB = 1000
MIN = 60.0
AWS_SPOT = "spot:aws:c7i.large:us-east-1"


def make_plane(home: Path, clock: FakeClock, **values: Any) -> ControlPlane:
    """A plane whose plugins are Portal's policies alone: the spot watch finds its policy by
    name among them, as it does among the installed ones."""
    settings = Settings.load({"home": str(home), **values}, environ={})
    pm = get_plugin_manager(autoload=False)
    pm.register(policies_plugin, name="policies")
    return ControlPlane(settings, clock=clock, plugins=Plugins(pm))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def plane(tmp_path: Path, clock: FakeClock) -> Iterator[ControlPlane]:
    plane = make_plane(tmp_path / "home", clock)
    yield plane
    plane.store.close()


def machines_of(plane: ControlPlane) -> SimulatedMachines:
    return SimulatedMachines(plane, SimulatedCloud(CLOUD))


def a_job(plane: ControlPlane, tmp: Path) -> Job:
    return plane.create_job(script="train.py", workdir=tmp)


# --- the cloud's data ------------------------------------------------------------------------


def test_the_cloud_data_file_is_read_and_a_bad_one_named(tmp_path: Path) -> None:
    good = tmp_path / "cloud.json"
    good.write_text(json.dumps(CLOUD))
    assert AWS_SPOT in {o.pool for o in load_cloud(str(good)).offers()}
    assert load_cloud(None) is SimulatedCloud.bundled()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidSettingError, match=r"simulated_cloud_data names .*bad\.json"):
        load_cloud(str(bad))


def test_an_unknown_cloud_setting_is_refused_with_the_choices(tmp_path: Path) -> None:
    with pytest.raises(InvalidSettingError, match=r"cloud has value 'aws'.*local, simulated"):
        Settings.load({"home": str(tmp_path)}, environ={"PORTAL_CLOUD": "aws"})
    assert Settings.load({}, environ={"PORTAL_CLOUD": "Simulated"}).cloud == "simulated"


# --- machines -----------------------------------------------------------------------------------


def test_machines_are_numbered_and_recorded(plane: ControlPlane, tmp_path: Path) -> None:
    machines = machines_of(plane)
    spot = machines.cloud.offer(AWS_SPOT)
    first, second = machines.provision(spot), machines.provision(spot)
    assert (first.id, second.id) == ("sim-0001", "sim-0002")
    assert first.name == "sim-0001 spot aws c7i.large (us-east-1)"
    job = a_job(plane, tmp_path)
    machines.assign(first, job.id, 1, on=AWS_SPOT)
    record = json.loads((first.directory / "machine.json").read_text())
    assert (record["pool"], record["notice_s"], record["job"], record["on"]) == (
        AWS_SPOT,
        120,
        job.id,
        AWS_SPOT,
    )
    assert [m.id for m in machines.all()] == ["sim-0001", "sim-0002"]
    assert machines.get("sim-0001").job_id == job.id


def test_only_a_spot_machine_with_a_node_is_reclaimed(plane: ControlPlane, tmp_path: Path) -> None:
    machines = machines_of(plane)
    job = a_job(plane, tmp_path)
    on_demand = machines.provision(machines.cloud.offer(AWS_SPOT.replace("spot", "on_demand")))
    machines.assign(on_demand, job.id, 1)
    with pytest.raises(InvalidArgumentError, match="reclaims only spot machines"):
        machines.reclaim(on_demand.id)
    spot = machines.assign(machines.provision(machines.cloud.offer(AWS_SPOT)), job.id, 1)
    with pytest.raises(InvalidArgumentError, match="runs no job now"):
        machines.reclaim(spot.id)  # its node never started
    with pytest.raises(InvalidArgumentError, match="runs on no simulated machine"):
        machines.get(a_job(plane, tmp_path).id)


# --- pools left out after a reclaim -----------------------------------------------------------


def test_a_reclaimed_pool_is_left_out_for_30_minutes(
    plane: ControlPlane, clock: FakeClock, tmp_path: Path
) -> None:
    placing = SimulatedPlacing(plane, machines_of(plane))
    job = a_job(plane, tmp_path)
    state = StateMeasure(bytes=10 * KB, figure="its checkpoint as stored")
    plane.store.record_reclaim(AWS_SPOT, clock.now(), "sim-0001")
    request = PlacementRequest.from_flags("resume")

    clock.advance(29 * MIN)
    plan = placing.plan(job, request, state)
    assert AWS_SPOT in placing.exclusions().excluded()
    assert plan.chosen is not None and plan.chosen.pool != AWS_SPOT
    assert "D5 pools left out after a reclaim: 1" in plan.lines
    skipped = [e.message for e in plan.events(clock.now()) if e.kind == "placement.skipped"]
    assert any(m.startswith("spot aws c7i.large (us-east-1) skipped: its pool") for m in skipped)

    clock.advance(2 * MIN)
    assert placing.exclusions().excluded() == frozenset()
    assert placing.plan(job, request, state).chosen.pool == AWS_SPOT  # type: ignore[union-attr]


def test_the_bound_leaves_out_spot_with_the_spec_wording(
    plane: ControlPlane, clock: FakeClock, tmp_path: Path
) -> None:
    placing = SimulatedPlacing(plane, machines_of(plane))
    state = StateMeasure(bytes=12_000 * KB, figure="its checkpoint as stored")
    plan = placing.plan(a_job(plane, tmp_path), PlacementRequest.from_flags("resume"), state)
    events = [e.message for e in plan.events(clock.now()) if e.kind == "placement.skipped"]
    assert (
        "spot aws c7i.large (us-east-1) skipped: this job's state (12.0 MB, its checkpoint as "
        "stored) exceeds what its 120 s notice can save (about 55.0 kB)" in events
    )
    assert plan.chosen is not None and plan.chosen.capacity is CapacityClass.ON_DEMAND


# --- a plan never picks spot below its measure, unless pinned ---------------------------------

_SPOT_POOLS = sorted(o.pool for o in SimulatedCloud(CLOUD).offers() if o.notice_s is not None)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stored=st.integers(min_value=0, max_value=200 * KB),
    reclaimed=st.lists(st.sampled_from(_SPOT_POOLS), max_size=2, unique=True),
    pin=st.none() | st.sampled_from(_SPOT_POOLS),
)
def test_a_plan_never_picks_spot_over_its_bound_unless_pinned(
    stored: int, reclaimed: list[str], pin: str | None
) -> None:
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as tmp:
        plane = make_plane(Path(tmp) / "home", clock)
        try:
            placing = SimulatedPlacing(plane, machines_of(plane))
            for pool in reclaimed:
                plane.store.record_reclaim(pool, clock.now() - 60, "sim-0001")
            state = StateMeasure(bytes=stored, figure="its checkpoint as stored")
            plan = placing.plan(
                a_job(plane, Path(tmp)), PlacementRequest.from_flags("resume", on=pin), state
            )
        finally:
            plane.store.close()
    assert plan.chosen is not None  # on-demand always fits these small states
    if pin is not None:
        assert plan.chosen.pool == pin
        return
    assert plan.chosen.pool not in reclaimed
    if plan.chosen.notice_s is not None:
        assert plan.bound is not None and plan.bound.bytes >= stored


# --- outgrowing spot: the node's watch -------------------------------------------------------


def _watched(plane: ControlPlane, tmp: Path, *, on: str | None = None) -> SpotWatch:
    machines = machines_of(plane)
    job = a_job(plane, tmp)
    machine = machines.assign(machines.provision(machines.cloud.offer(AWS_SPOT)), job.id, 1, on=on)
    watch = SpotWatch(plane, job.id, machine)
    watch.placing = SimulatedPlacing(plane, machines)
    return watch


def _kinds(plane: ControlPlane, job_id: str) -> list[str]:
    return [e.kind for _, e in plane.store.events(job_id)]


def test_measured_at_every_check_and_moved_once_over(plane: ControlPlane, tmp_path: Path) -> None:
    watch = _watched(plane, tmp_path)
    assert watch.checked(20 * KB, partial=False) == []  # 22.0 kB fits the 55.0 kB bound
    assert watch.checked(90 * KB, partial=True) == []  # a partial walk is no measure
    decisions = watch.checked(60 * KB, partial=False)  # grown: 66.0 kB
    assert [d.verdict for d in decisions] == [Verdict.PROVISION, Verdict.MOVE]
    assert decisions[0].reason == (
        "provision on-demand gcp e2-standard-2 (us-central1) ahead: this job's state (66.0 kB, "
        "the check's walk) exceeds what the 120 s notice of spot aws c7i.large (us-east-1) "
        "can save (about 55.0 kB); the job moves there once it is ready"
    )
    assert watch.target is not None and watch.target.id == "sim-0002"
    assert _kinds(plane, watch.job_id)[-2:] == ["spot.provision", "spot.move"]
    notices = list(plane.paths(watch.job_id).notices.glob("*.json"))
    assert len(notices) == 1  # the node pauses its own job for the move
    assert watch.checked(90 * KB, partial=False) == []  # moving already: nothing twice


class _KeepingSpot:
    """A third party's ``spot`` policy (Portal's blocked): it keeps every job where it is."""

    name = "spot"

    def evaluate(
        self, job: Job, offers: Sequence[Offer], context: PlacementContext
    ) -> list[Decision]:
        return []

    def watch(self, job: Job, offers: Sequence[Offer], context: PlacementContext) -> list[Decision]:
        current = context.settings["current_offer"]
        return [
            Decision(policy="acme", verdict=Verdict.WARN, reason="acme keeps it", offer=current)
        ]


class _AcmePolicies:
    @hookimpl
    def portal_placement_policies(self) -> list[PlacementPolicySpec]:
        return [PlacementPolicySpec(name="spot", factory=lambda config: _KeepingSpot())]


def test_the_watch_asks_the_policy_registered_as_spot(clock: FakeClock, tmp_path: Path) -> None:
    """The node's watch looks its policy up by name: a plugin's ``spot`` (Portal's own blocked)
    decides, and what it says is carried out and recorded."""
    settings = Settings.load({"home": str(tmp_path / "home")}, environ={})
    pm = get_plugin_manager(autoload=False)
    pm.register(_AcmePolicies(), name="acme")
    plane = ControlPlane(settings, clock=clock, plugins=Plugins(pm))
    watch = _watched(plane, tmp_path)
    decisions = watch.checked(60 * KB, partial=False)  # over the bound: Portal's would move it
    assert [(d.verdict, d.reason) for d in decisions] == [(Verdict.WARN, "acme keeps it")]
    assert _kinds(plane, watch.job_id).count("spot.kept") == 1 and watch.target is None
    plane.store.close()


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "portal-acme-policy"


def _example_policy() -> Any:
    """examples/portal-acme-policy's plugin module, as its entry point loads it once installed
    (the integration session installs its wheel and finds it so)."""
    import importlib.util

    path = EXAMPLE / "src" / "portal_acme_policy" / "plugin.py"
    spec = importlib.util.spec_from_file_location("portal_acme_policy_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plane_with_example(home: Path, clock: FakeClock, **values: Any) -> ControlPlane:
    pm = get_plugin_manager(autoload=False)
    pm.register(policies_plugin, name="policies")
    pm.register(_example_policy(), name="acme-policy")
    plugins = Plugins(pm)
    settings = Settings.load({"home": str(home), **values}, environ={}, plugins=plugins)
    return ControlPlane(settings, clock=clock, plugins=plugins)


def test_a_third_partys_policy_listed_in_the_setting_watches_like_portals_own(
    clock: FakeClock, tmp_path: Path
) -> None:
    """The example policy, its own setting read from the stack, is asked before Portal's spot
    policy because ``placement.watch`` lists it first; its warning is recorded once, under its
    name, and spot's move goes on."""
    plane = _plane_with_example(
        tmp_path / "home", clock, **{"placement.watch": "acme,spot", "acme.max_gib": 0.00004}
    )
    watch = _watched(plane, tmp_path)
    assert watch.checked(20 * KB, partial=False) == []  # 22 kB: under both
    decisions = watch.checked(60 * KB, partial=False)  # 66 kB: over acme's cap and spot's bound
    assert (decisions[0].policy, decisions[0].verdict) == ("acme", Verdict.WARN)
    assert "passed 4e-05 GiB" in decisions[0].reason
    assert [d.verdict for d in decisions[1:]] == [Verdict.PROVISION, Verdict.MOVE]
    assert _kinds(plane, watch.job_id)[-3:] == ["acme.kept", "spot.provision", "spot.move"]
    plane.store.close()


def test_the_default_list_never_asks_a_policy_it_does_not_name(
    clock: FakeClock, tmp_path: Path
) -> None:
    plane = _plane_with_example(tmp_path / "home", clock, **{"acme.max_gib": 0.00004})
    watch = _watched(plane, tmp_path)
    decisions = watch.checked(60 * KB, partial=False)
    assert "acme" not in {d.policy for d in decisions}
    assert "acme.kept" not in _kinds(plane, watch.job_id)
    plane.store.close()


def test_a_listed_policy_no_plugin_registers_is_said_once_and_the_others_still_watch(
    clock: FakeClock, tmp_path: Path
) -> None:
    plane = make_plane(tmp_path / "home", clock, **{"placement.watch": "ghost,spot"})
    watch = _watched(plane, tmp_path)
    watch.checked(20 * KB, partial=False)
    decisions = watch.checked(60 * KB, partial=False)
    assert [d.verdict for d in decisions] == [Verdict.PROVISION, Verdict.MOVE]
    missing = [
        e for _, e in plane.store.events(watch.job_id) if e.kind == "placement.not-installed"
    ]
    assert len(missing) == 1 and missing[0].data["policy"] == "ghost"
    assert "placement.watch" in missing[0].message and "portal plugins" in missing[0].message
    plane.store.close()


def test_the_guides_policy_sample_is_the_tested_examples_code() -> None:
    """docs/plugins.md shows the example's policy as it is: the sample is its code, word for
    word, so what the tests above run is what the guide teaches."""
    import re

    guide = (EXAMPLE.parents[1] / "docs" / "plugins.md").read_text(encoding="utf-8")
    sample = next(b for b in re.findall(r"```python\n(.*?)```", guide, re.S) if "StateCap" in b)
    code = (EXAMPLE / "src" / "portal_acme_policy" / "plugin.py").read_text(encoding="utf-8")
    assert sample.strip() in code


def test_a_bad_watch_list_is_refused_with_what_is_accepted(tmp_path: Path) -> None:
    with pytest.raises(InvalidSettingError, match="is not a policy name"):
        make_plane(tmp_path / "home", FakeClock(), **{"placement.watch": "spot,no good"})


def test_move_when_over_off_warns_once_and_stays(clock: FakeClock, tmp_path: Path) -> None:
    plane = make_plane(tmp_path / "home", clock, **{"spot.move_when_over": False})
    watch = _watched(plane, tmp_path)
    for _ in range(2):
        decisions = watch.checked(60 * KB, partial=False)
        assert [d.verdict for d in decisions] == [Verdict.WARN]
    assert "spot.move_when_over is false" in decisions[0].reason
    assert _kinds(plane, watch.job_id).count("spot.kept") == 1
    assert watch.target is None
    assert not list(plane.paths(watch.job_id).notices.glob("*.json"))
    plane.store.close()


def test_a_job_pinned_to_its_exact_spot_machine_is_warned_and_left(
    plane: ControlPlane, tmp_path: Path
) -> None:
    watch = _watched(plane, tmp_path, on=AWS_SPOT)
    decisions = watch.checked(60 * KB, partial=False)
    assert [d.verdict for d in decisions] == [Verdict.WARN]
    assert decisions[0].reason.startswith(
        f"spot aws c7i.large (us-east-1) kept because --on {AWS_SPOT} pins the job to it"
    )
    assert watch.target is None


# --- a move is refused while the job's node is silent ------------------------------------------


def test_a_move_is_refused_while_the_node_is_silent(clock: FakeClock, tmp_path: Path) -> None:
    plane = make_plane(tmp_path / "home", clock, cloud="simulated")
    job = a_job(plane, tmp_path)
    plane.store.start_attempt(job.id, machine="sim-0001 spot aws c7i.large (us-east-1)", at=0.0)
    plane.store.heard(job.id, clock.now())
    clock.advance(5 * MIN)
    portal = Portal(plane)
    portal.store.create_job_key(job.id)  # as every job has: its checkpoints are read
    for move in (portal.plan_move, portal.move):
        with pytest.raises(
            JobStateConflictError, match=r"moving job .* is refused for now: .*last heard"
        ):
            move(job.id)
    portal.close()
