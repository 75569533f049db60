"""End to end on the simulated cloud: the real CLI and nodes in subprocesses, machines as local
node processes, reclaims as real notices, placement through the planner.

The cloud's data is the test's own (``PORTAL_SIMULATED_CLOUD_DATA``): save rates so slow that a
checkpoint of a few kB is over the bound of GCP's 30 s notice and under AWS's 120 s one, so every
rule of "State size and spot" shows on a tiny job.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PortalCli
from simcloud import CLOUD

from portal.control.store import SqliteControlStore

#: A job that waits between steps while the file ``hold`` exists, so the test decides when it
#: moves on; its output is the same as an uninterrupted run's.
HELD = """\
import os, random, sys, time
HOLD = os.path.join("__SWITCHES__", "hold")
rng = random.Random(int(sys.argv[1]))
total = 0
for step in range(int(sys.argv[2])):
    total += rng.randint(1, 100)
    print(f"step {step} total {total}", flush=True)
    while os.path.exists(HOLD):
        time.sleep(0.02)
print("final", total)
"""

#: As HELD, and while held it grows its state by 100 kB of random bytes once ``grow`` exists.
GROWS = """\
import os, random, sys, time
HOLD = os.path.join("__SWITCHES__", "hold")
GROW = os.path.join("__SWITCHES__", "grow")
rng = random.Random(int(sys.argv[1]))
total = 0
blob = b""
for step in range(int(sys.argv[2])):
    total += rng.randint(1, 100)
    print(f"step {step} total {total}", flush=True)
    while os.path.exists(HOLD):
        if not blob and os.path.exists(GROW):
            blob = os.urandom(100_000)
        time.sleep(0.02)
print("final", total)
"""

#: As GROWS, and it lets go of what it grew once ``shrink`` exists.
SHRINKS = GROWS.replace(
    "        if not blob and os.path.exists(GROW):",
    '        if blob and os.path.exists(os.path.join("__SWITCHES__", "shrink")):\n'
    '            blob = b""\n'
    "        elif not blob and os.path.exists(GROW) and not os.path.exists("
    'os.path.join("__SWITCHES__", "shrink")):',
)

GCP_SKIP = (
    "spot gcp e2-standard-2 (us-central1) skipped: this job's state ({size}, its checkpoint as "
    "stored) exceeds what its 30 s notice can save (about 1.1 kB)"
)


class Sim(PortalCli):
    """The CLI with the simulated cloud on, and the cloud's own console."""

    def cloud(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "portal.sim", *args],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def status(self, job: str) -> dict[str, object]:
        result = self("status", job, "--json")
        assert result.returncode == 0, result.stderr
        data: dict[str, object] = json.loads(result.stdout)
        return data

    def machines(self, job: str) -> list[str]:
        return [str(a["machine"]) for a in self.status(job)["attempts"]]  # type: ignore[attr-defined]

    def events(self, job_id: str) -> list[tuple[str, str]]:
        store = SqliteControlStore(self.home / "portal.db")
        try:
            return [(e.kind, e.message) for _, e in store.events(job_id)]
        finally:
            store.close()

    def wait_event(self, job_id: str, kind: str, timeout: float = 60) -> str:
        """The message of the job's first event of ``kind``, once there is one."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for found, message in self.events(job_id):
                if found == kind:
                    return message
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} never had a {kind} event: {self.events(job_id)}")

    def wait_state(self, job: str, state: str, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.state(job) == state:
                return
            time.sleep(0.1)
        raise AssertionError(f"job {job} never became {state}: {self.status(job)}")


@pytest.fixture
def sim(portal: PortalCli, tmp_path: Path) -> Iterator[Sim]:
    data = tmp_path / "cloud.json"
    data.write_text(json.dumps(CLOUD))
    # The switches are absolute paths in the test's directory: a simulated machine runs the job
    # in a directory of its own, and the working directory travels with a checkpoint (the
    # switches must not: .portalignore).
    switches = str(portal.workdir)
    (portal.workdir / "held.py").write_text(HELD.replace("__SWITCHES__", switches))
    (portal.workdir / "grows.py").write_text(GROWS.replace("__SWITCHES__", switches))
    (portal.workdir / "shrinks.py").write_text(SHRINKS.replace("__SWITCHES__", switches))
    (portal.workdir / ".portalignore").write_text("hold\ngrow\nshrink\n")
    cli = Sim(portal.home, portal.workdir)
    cli.env.update(PORTAL_CLOUD="simulated", PORTAL_SIMULATED_CLOUD_DATA=str(data))
    yield cli


def _size(stored_bytes: int) -> str:
    """The policies' wording of a checkpoint as stored, a tenth added (kB for these jobs)."""
    grown = -(-stored_bytes * 11 // 10)
    return f"{grown / 1000:.1f} kB"


def test_reclaimed_spot_job_resumes_elsewhere_identically(sim: Sim) -> None:
    expected = sim.plain("held.py", "5", "40")
    hold = sim.workdir / "hold"
    hold.touch()
    job = sim("run", "--detach", "--name", "r", "held.py", "5", "40").stdout.strip()
    sim.wait_for_output(job, "step 0 ")

    moved = sim("move", "r", "--on", "spot:aws:c7i.large:us-east-1")
    assert moved.returncode == 0, moved.stderr
    assert "moved from this machine (local) to sim-0001 spot aws c7i.large" in moved.stderr
    sim.wait_state("r", "running")

    reclaim = sim.cloud("reclaim", "r")
    assert reclaim.returncode == 0, reclaim.stderr
    assert "goes in 120 s" in reclaim.stdout  # the offer's notice length
    sim.wait_state("r", "suspended")
    stored = int(sim.status("r")["last_checkpoint"]["bytes"])  # type: ignore[index]

    plan = sim("resume", "r", "--plan")
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    assert lines[0] == f"D1 request: resume {job}"
    assert lines[1].startswith(f"D2 state: {_size(stored)}, its checkpoint as stored")
    d5, d6, d7 = (lines.index(f) for f in lines if f[:3] in ("D5 ", "D6 ", "D7 "))
    assert lines[d5] == "D5 pools left out after a reclaim: 1"
    assert lines[d5 + 1].startswith(
        "   would not use spot aws c7i.large (us-east-1): its pool reclaimed a machine"
    )
    assert lines[d6 : d7 + 1] == [
        "D6 spot offers left out for the state bound: 1",
        "   would not use " + GCP_SKIP.format(size=_size(stored)).replace(" skipped:", ":", 1),
        "D7 candidates, cheapest first: 4",
    ]
    assert lines[-1].startswith("D8 choice: spot aws m7i.large (us-east-1) at $0.0353/h")
    assert sim.state("r") == "suspended"  # --plan changes nothing

    hold.unlink()
    resumed = sim("resume", "r")
    assert resumed.returncode == 0, resumed.stderr
    assert sim("logs", "r").stdout == expected
    assert sim.machines("r") == [
        "local",
        "sim-0001 spot aws c7i.large (us-east-1)",
        "sim-0002 spot aws m7i.large (us-east-1)",
    ]
    events = sim.events(job)
    assert ("placement.skipped", GCP_SKIP.format(size=_size(stored))) in events
    kinds = [k for k, _ in events]
    assert "suspended" in kinds[kinds.index("reclaimed") :]  # the reclaim suspended it
    listed = sim.cloud("list").stdout
    assert "sim-0001 spot aws c7i.large (us-east-1): released" in listed
    # Each machine ran the job in a directory of its own, where its files arrived with the
    # checkpoint (the switch left out by .portalignore).
    workdir = Path(str(sim.status("r")["workdir"]))
    assert workdir.parts[-4:] == ("sim", "machines", "sim-0002", "work")
    assert (workdir / "held.py").read_text() == (sim.workdir / "held.py").read_text()
    assert not (workdir / "hold").exists()


def test_move_carries_a_running_job_with_its_state(sim: Sim) -> None:
    expected = sim.plain("held.py", "9", "30")
    hold = sim.workdir / "hold"
    hold.touch()
    job = sim("run", "--detach", "--name", "m", "held.py", "9", "30").stdout.strip()
    sim.wait_for_output(job, "step 0 ")

    plan = sim("move", "m", "--no-spot", "--plan")
    assert plan.returncode == 0, plan.stderr
    assert "D4 filters: 3 of 6 left out (--no-spot: 3)" in plan.stdout
    assert plan.stdout.splitlines()[-1].startswith(
        "D8 choice: on-demand gcp e2-standard-2 (us-central1) at $0.0670/h; not reclaimed"
    )

    moved = sim("move", "m", "--no-spot")
    assert moved.returncode == 0, moved.stderr
    sim.wait_state("m", "running")
    assert sim.machines("m") == ["local", "sim-0001 on-demand gcp e2-standard-2 (us-central1)"]
    machine = sim.home / "sim" / "machines" / "sim-0001" / "machine.json"
    record = json.loads(machine.read_text())
    assert (record["capacity"], record["notice_s"], record["job"], record["attempt"]) == (
        "on_demand",
        None,
        job,
        2,
    )
    kinds = [k for k, _ in sim.events(job)]
    assert kinds.index("provisioned") < kinds.index("moving") < kinds.index("suspended")
    again = sim("move", "m", "--plan").stdout.splitlines()
    assert again[1].startswith("D2 state: ") and (
        "the last move's capsule" in again[1] or "the check's walk" in again[1]
    )  # a checkpoint's bytes, never the memory figure, once there is one

    hold.unlink()
    sim.wait_state("m", "done")
    assert sim("logs", "m").stdout == expected


def test_an_exact_on_keeps_a_spot_machine_over_its_bound_with_the_warning(sim: Sim) -> None:
    hold = sim.workdir / "hold"
    hold.touch()
    job = sim("run", "--detach", "--name", "p", "held.py", "1", "5").stdout.strip()
    sim.wait_for_output(job, "step 0 ")
    sim("notice", "p")
    sim.wait_state("p", "suspended")
    stored = int(sim.status("p")["last_checkpoint"]["bytes"])  # type: ignore[index]

    on = "spot:gcp:e2-standard-2:us-central1"
    plan = sim("resume", "p", "--on", on, "--plan").stdout.splitlines()
    assert f"D1 request: resume {job} --on {on}" == plan[0]
    assert plan[plan.index("D6 spot offers left out for the state bound: none") + 1] == (
        f"   warning: spot gcp e2-standard-2 (us-central1) kept because --on {on} names it: "
        f"this job's state ({_size(stored)}, its checkpoint as stored) exceeds what its 30 s "
        "notice can save (about 1.1 kB); if it is reclaimed, the work since its last checkpoint "
        "may be lost"
    )
    assert plan[-1].startswith("D8 choice: spot gcp e2-standard-2 (us-central1)")

    stays = sim("resume", "p", "--on", on, "--no-spot")  # nothing left: it stays, and says why
    assert stays.returncode == 75
    assert f"job {job} stays suspended: no offer is left after the filters above" in stays.stderr
    assert sim.state("p") == "suspended"
    assert sim.wait_event(job, "placement.none").startswith(f"job {job} stays suspended")

    hold.unlink()
    resumed = sim("resume", "p", "--on", on)
    assert resumed.returncode == 0, resumed.stderr
    assert sim.machines("p")[-1] == "sim-0001 spot gcp e2-standard-2 (us-central1)"
    assert "portal: warning: spot gcp e2-standard-2 (us-central1) kept because" in resumed.stderr
    warnings = [m for k, m in sim.events(job) if k == "placement.warning"]
    assert len(warnings) == 1 and warnings[0].startswith(
        "spot gcp e2-standard-2 (us-central1) kept"
    )


def test_a_silent_machine_stops_reporting_and_its_job_keeps_its_checkpoint(sim: Sim) -> None:
    hold = sim.workdir / "hold"
    hold.touch()
    job = sim("run", "--detach", "--name", "s", "held.py", "2", "5").stdout.strip()
    sim.wait_for_output(job, "step 0 ")
    assert sim("move", "s", "--on", "on-demand:aws:c7i.large:us-east-1").returncode == 0
    sim.wait_state("s", "running")
    pid = int((sim.home / "jobs" / job / "attempts" / "2" / "node.pid").read_text())

    assert sim.cloud("silence", "s").returncode == 0
    status = Path(f"/proc/{pid}/status").read_text()
    assert "State:\tT" in status  # stopped: it reports nothing more
    assert "silent" in sim.cloud("list").stdout
    assert sim.cloud("reclaim", "s").returncode == 64  # on-demand: never reclaimed

    assert sim.cloud("release", "s").returncode == 0
    sim.wait_state("s", "suspended")  # the node is gone; its last checkpoint is kept
    assert [k for k, _ in sim.events(job)][-1] == "node-died"


def test_without_a_cloud_placement_options_say_how_to_get_offers(portal: PortalCli) -> None:
    env = {k: v for k, v in portal.env.items() if k != "PORTAL_CLOUD"}
    portal.env = env
    job = portal("run", "--detach", "exits.py", "0").stdout.strip()
    portal("wait", job, "--timeout", "30")
    moved = portal("move", job)
    assert moved.returncode == 64
    assert "this Portal places jobs on this machine only" in moved.stderr
    assert "PORTAL_CLOUD=simulated" in moved.stderr
    resumed = portal("resume", job, "--gpu", "L4")
    assert resumed.returncode == 64 and "PORTAL_CLOUD=simulated" in resumed.stderr


def test_a_job_that_outgrows_its_spot_notice_is_moved_to_on_demand(sim: Sim) -> None:
    sim.env["PORTAL_CAPTURE_PROBE_EVERY_S"] = "0.3"  # the check (and the measure) runs often
    expected = sim.plain("grows.py", "4", "12")
    hold = sim.workdir / "hold"
    hold.touch()
    job = sim("run", "--detach", "--name", "g", "grows.py", "4", "12").stdout.strip()
    sim.wait_for_output(job, "step 0 ")
    sim.wait_event(job, "carry-ok")  # the check's walk: a few kB, under AWS's bound

    assert sim("move", "g", "--on", "spot:c7i.large").returncode == 0
    sim.wait_state("g", "running")
    assert sim.machines("g")[-1] == "sim-0001 spot aws c7i.large (us-east-1)"

    (sim.workdir / "grow").touch()
    provision = sim.wait_event(job, "spot.provision")
    assert provision.startswith(
        "provision on-demand gcp e2-standard-2 (us-central1) ahead: this job's state ("
    )
    assert provision.endswith(
        "kB, the check's walk) exceeds what the 120 s notice of spot aws c7i.large "
        "(us-east-1) can save (about 55.0 kB); the job moves there once it is ready"
    )
    end = time.monotonic() + 60
    while len(sim.machines("g")) < 3 and time.monotonic() < end:
        time.sleep(0.1)
    assert sim.machines("g")[1:] == [
        "sim-0001 spot aws c7i.large (us-east-1)",
        "sim-0002 on-demand gcp e2-standard-2 (us-central1)",
    ]
    kinds = [k for k, _ in sim.events(job)]
    moved = kinds.index("spot.move")
    assert kinds.index("spot.provision") < moved < kinds.index("suspended", moved)

    explain = sim("explain", "g").stdout
    provisioned = explain.index("provision (policy spot)")
    assert provisioned < explain.index("move (policy spot)", provisioned)
    assert "can save (about 55.0 kB)" in explain

    hold.unlink()
    sim.wait_state("g", "done")
    assert sim("logs", "g").stdout == expected


def test_memory_is_the_machines_memory_never_a_guess_of_the_state(sim: Sim) -> None:
    """``--memory 8`` keeps every machine with less out (named on D4) and sizes no state: a
    spot offer is not warned about an 8 GiB state the job never said it has."""
    plan = sim("run", "--memory", "8", "--plan", "held.py", "3", "4")
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    assert "what it asked for" not in plan.stdout
    (d4,) = [line for line in lines if line.startswith("D4 ")]
    assert "--memory 8:" in d4, d4
    chosen = lines[-1]
    assert chosen.startswith("D8 choice: "), chosen
    type_name = chosen.split()[4]  # D8 choice: spot gcp e2-standard-2 ...
    from portal.policies.simulated import SimulatedCloud

    memory = {t.name: t.memory_gib for t in SimulatedCloud.bundled().machine_types()}
    assert memory.get(type_name, 0) >= 8, (type_name, chosen)
    both = sim("resume", "nothing", "--no-spot", "--spot-only")
    assert both.returncode == 64
    assert "--no-spot and --spot-only ask for opposite machines: give one of them" in both.stderr


def test_a_new_job_is_placed_by_what_it_asks_for_with_one_warning(sim: Sim) -> None:
    expected = sim.plain("held.py", "3", "4")
    plan = sim("run", "--state-gib", "1", "--plan", "held.py", "3", "4")
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    assert lines[1] == (
        "D2 state: 1.1 GB, what it asked for (a guess: spot offers below it are used with a "
        "warning)"
    )
    assert lines[-1] == (
        "D8 choice: spot gcp e2-standard-2 (us-central1) at $0.0201/h; notice 30 s, can save "
        "about 1.1 kB"
    )
    assert "held.py" not in sim("jobs").stdout  # --plan starts nothing
    sim.env["PORTAL_CAPTURE_PROBE"] = "full"  # the job's own setting: the plan says its limit
    try:
        full = sim("run", "--state-gib", "1", "--plan", "held.py", "3", "4").stdout.splitlines()
    finally:
        del sim.env["PORTAL_CAPTURE_PROBE"]
    assert full[1:-1] == lines[1:]  # line 0 names the draft job's id
    assert full[-1] == (
        "capture_probe is full, but on spot gcp e2-standard-2 (us-central1) the checkpoint check "
        "would run without its rehearsal: the rehearsal runs on on-demand machines only, as a "
        "real checkpoint cannot be cut short"
    )

    done = sim("run", "--state-gib", "1", "--name", "n", "held.py", "3", "4")
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected
    warning = (
        "spot gcp e2-standard-2 (us-central1) used with a warning: this job's state (1.1 GB, "
        "what it asked for) exceeds what its 30 s notice can save (about 1.1 kB); a new job's "
        "--state-gib is a guess, so its measured state will decide once Portal has one"
    )
    assert [line for line in done.stderr.splitlines() if "warning" in line] == [
        f"portal: warning: {warning}"
    ]
    assert sim.machines("n") == ["sim-0001 spot gcp e2-standard-2 (us-central1)"]
    events = sim.events(str(sim.status("n")["job"]))
    assert [m for k, m in events if k == "placement.warning"] == [warning]
    assert ("placed", "placed on sim-0001 spot gcp e2-standard-2 (us-central1): ") in [
        (k, m[: len("placed on sim-0001 spot gcp e2-standard-2 (us-central1): ")])
        for k, m in events
    ]


def test_a_spot_only_job_stays_suspended_until_told_the_way_out(sim: Sim) -> None:
    expected = sim.plain("grows.py", "6", "5")
    hold = sim.workdir / "hold"
    hold.touch()
    job = sim("run", "--detach", "--spot-only", "--name", "s", "grows.py", "6", "5")
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip()
    sim.wait_for_output(job_id, "step 0 ")
    assert sim.machines("s") == ["sim-0001 spot gcp e2-standard-2 (us-central1)"]
    (sim.workdir / "grow").touch()
    time.sleep(1.0)  # the held loop grows its state by 100 kB within a few of its 20 ms turns
    assert sim.cloud("reclaim", "s").returncode == 0
    sim.wait_state("s", "suspended")

    # 100 kB is over every spot offer's bound (AWS 55 kB; GCP's pool is left out after its
    # reclaim, and its bound is 1.1 kB): a spot-only job stays, and is told the way out.
    stays = sim("resume", "s")
    assert stays.returncode == 75, stays.stderr
    way_out = (
        f"no spot offer can save this job's state (%s, its checkpoint as stored); resume it on an "
        f"exact machine (portal resume {job_id} --on SPEC) or on-demand (portal resume {job_id} "
        "--no-spot)"
    )
    assert "no spot offer can save" in stays.stderr and f"portal resume {job_id} --no-spot" in (
        stays.stderr
    )
    none = [m for k, m in sim.events(job_id) if k == "placement.none"]
    assert len(none) == 1 and none[0].startswith(f"job {job_id} stays suspended: no spot offer")
    assert none[0].endswith(way_out.split("); ", 1)[1])
    assert sim.state("s") == "suspended"

    hold.unlink()
    resumed = sim("resume", "s", "--no-spot")
    assert resumed.returncode == 0, resumed.stderr
    assert sim.machines("s")[-1] == "sim-0002 on-demand gcp e2-standard-2 (us-central1)"
    assert sim("logs", "s").stdout == expected


def test_a_move_that_does_not_happen_releases_the_machine_provisioned_for_it(sim: Sim) -> None:
    """The spot watch provisions ahead of a move; when the pause is abandoned (or fails, or the
    job ends first) that machine is released at once, with an event saying why."""
    from portal.control.plane import ControlPlane
    from portal.core.settings import Settings
    from portal.sim.outgrow import SpotWatch
    from portal.sim.placing import SimulatedPlacing

    hold = sim.workdir / "hold"
    hold.touch()
    job_id = sim("run", "--detach", "--name", "w", "held.py", "1", "3").stdout.strip()
    sim.wait_for_output(job_id, "step 0 ")
    plane = ControlPlane(Settings.load(environ=sim.env))
    try:
        placing = SimulatedPlacing(plane)
        offers = {o.describe(): o for o in placing.offers()}
        spot = placing.machines.provision(offers["spot aws c7i.large (us-east-1)"])
        watch = SpotWatch(plane, job_id, spot)
        watch.target = placing.machines.provision(offers["on-demand aws c7i.large (us-east-1)"])
        watch.not_suspended("the pause was abandoned (the test's reason)")
        assert watch.target is None
        released = placing.machines.get("sim-0002")
        assert released.released_at is not None
        assert (
            "spot.released",
            "sim-0002 on-demand aws c7i.large (us-east-1), provisioned for the move off sim-0001 "
            "spot aws c7i.large (us-east-1), is released: the pause was abandoned (the test's "
            "reason)",
        ) in sim.events(job_id)
        watch.not_suspended("again")  # nothing provisioned any more: nothing happens
        assert [k for k, _ in sim.events(job_id)].count("spot.released") == 1
    finally:
        plane.store.close()
    hold.unlink()
    sim.wait_state("w", "done")


def _wait_machines(sim: Sim, job: str, count: int, timeout: float = 60) -> list[str]:
    end = time.monotonic() + timeout
    while len(sim.machines(job)) < count and time.monotonic() < end:
        time.sleep(0.1)
    machines = sim.machines(job)
    assert len(machines) >= count, (machines, sim.events(job))
    return machines


def test_a_job_that_left_spot_returns_once_its_state_fits_again(sim: Sim) -> None:
    """Moved off spot when it outgrew the notice, the job goes back (the return policy, at a
    check) once its state is small again, with a fifth of the bound to spare."""
    sim.env["PORTAL_CAPTURE_PROBE_EVERY_S"] = "0.3"
    expected = sim.plain("shrinks.py", "5", "10")
    hold = sim.workdir / "hold"
    hold.touch()
    job = sim("run", "--detach", "--name", "r", "shrinks.py", "5", "10").stdout.strip()
    sim.wait_for_output(job, "step 0 ")
    sim.wait_event(job, "carry-ok")
    assert sim("move", "r", "--on", "spot:c7i.large").returncode == 0
    sim.wait_state("r", "running")
    start = len(sim.machines("r"))
    assert sim.machines("r")[-1].endswith("spot aws c7i.large (us-east-1)")

    (sim.workdir / "grow").touch()
    sim.wait_event(job, "spot.move")
    off = _wait_machines(sim, job, start + 1)
    assert off[-1].endswith("on-demand gcp e2-standard-2 (us-central1)"), off

    (sim.workdir / "shrink").touch()
    provision = sim.wait_event(job, "return.provision")
    assert provision.startswith(
        "provision spot aws c7i.large (us-east-1) ahead: spot aws c7i.large (us-east-1) can take "
        "the job back to spot from on-demand gcp e2-standard-2 (us-central1)"
    ), provision
    back = _wait_machines(sim, job, start + 2)
    assert back[-1].endswith("spot aws c7i.large (us-east-1)"), back
    explain = sim("explain", "r").stdout
    provisioned = explain.index("provision (policy return)")
    assert provisioned < explain.index("move (policy return)", provisioned)

    hold.unlink()
    sim.wait_state("r", "done")
    assert sim("logs", "r").stdout == expected


def test_a_job_placed_no_spot_stays_on_demand(sim: Sim) -> None:
    """--no-spot is the user's choice: the machine records it, and at a check neither return
    nor cheaper takes the job to spot, where the same job placed without it goes back."""
    from portal.control.plane import ControlPlane
    from portal.core.domain import Verdict
    from portal.core.settings import Settings
    from portal.sim.outgrow import SpotWatch
    from portal.sim.placing import SimulatedPlacing

    hold = sim.workdir / "hold"
    hold.touch()
    job = sim("run", "--detach", "--no-spot", "--name", "n", "held.py", "2", "3").stdout.strip()
    sim.wait_for_output(job, "step 0 ")
    plane = ControlPlane(Settings.load(environ=sim.env))
    try:
        placing = SimulatedPlacing(plane)
        placed = placing.machines.get(job)
        assert placed.no_spot and not placed.offer.capacity.interruptible, placed
        # A check of the running job (a few kB: any spot notice here could save it).
        assert SpotWatch(plane, job, placed).checked(3_000, partial=False) == []
        other = plane.create_job(script="held.py", workdir=str(sim.workdir))
        free = placing.machines.provision(placed.offer)
        decisions = SpotWatch(plane, other.id, free).checked(3_000, partial=False)
        assert [(d.policy, d.verdict) for d in decisions] == [
            ("return", Verdict.PROVISION),
            ("return", Verdict.MOVE),
        ]
    finally:
        plane.store.close()
    kinds = [k for k, _ in sim.events(job)]
    assert not [k for k in kinds if k.startswith(("return.", "cheaper.", "spot."))], kinds
    hold.unlink()
    sim.wait_state("n", "done")
