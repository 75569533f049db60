"""A job on a machine whose provider is detected is watched by that provider's notice source:
a notice served by the provider's conformance fake suspends it, and `portal explain` names it."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from conftest import PortalCli

from portal.providers.aws.testing import FakeIMDS
from portal.providers.azure.testing import FakeAzureMetadata
from portal.providers.gcp.testing import FakeGCEMetadata


@pytest.fixture
def imds() -> Iterator[FakeIMDS]:
    with FakeIMDS(instance_type="c7i.large", life_cycle="spot") as fake:
        yield fake


@pytest.mark.one_python
def test_an_aws_spot_interruption_suspends_the_job(portal: PortalCli, imds: FakeIMDS) -> None:
    portal.env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = imds.url
    expected = portal.plain("count.py", "5")
    job = portal("run", "--detach", "--name", "spot", "count.py", "5").stdout.strip()
    portal.wait_for_output(job, "step 3 ")
    imds.preempt(in_seconds=120)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    explain = portal("explain", job).stdout
    assert "notice from aws (aws, preemption)" in explain
    # About 120 s as first seen (EC2 states the time to the second).
    assert re.search(r"provider aws, source aws, notice 1[12]\d s", explain), explain
    # The machine is gone; the job resumes elsewhere (here: where no interruption is pending).
    imds.cancel()
    del portal.env["AWS_EC2_METADATA_SERVICE_ENDPOINT"]
    assert portal("resume", job).returncode == 0
    assert portal("logs", job).stdout == expected


@pytest.mark.one_python
def test_on_a_spot_machine_the_node_knows_it_is_spot(portal: PortalCli, imds: FakeIMDS) -> None:
    """The node asks the source that detected the machine what it is: on a spot VM a
    capture_probe = full check runs without its rehearsal, and the machine is named."""
    portal.env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = imds.url
    portal.env["PORTAL_CAPTURE_PROBE"] = "full"
    job = portal("run", "--detach", "--name", "spot", "count.py", "1").stdout.strip()
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "done"
    events = {e["kind"]: e for e in _events(portal, job)}
    assert events["machine"]["message"].startswith("this machine is aws c7i.large, spot, in ")
    assert events["machine"]["data"]["capacity"] == "spot"
    assert events["carry-no-rehearsal"]["data"]["purchase"] == "spot"
    assert "this is a spot machine" in events["carry-no-rehearsal"]["message"]


@pytest.mark.one_python
def test_a_providers_setting_in_config_toml_reaches_its_source(
    portal: PortalCli, imds: FakeIMDS
) -> None:
    """The AWS plugin declares its settings (portal_settings): one set with portal config set
    lands in config.toml, is shown with where it came from, and reaches the node's AWS source:
    the job is watched on the fake IMDS with no variable set, and a notice suspends it."""
    assert "AWS_EC2_METADATA_SERVICE_ENDPOINT" not in portal.env
    bad = portal("config", "set", "aws.token_ttl_s", "0")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "aws.token_ttl_s" in bad.stderr and "1 to 21600" in bad.stderr, bad.stderr
    assert portal("config", "set", "aws.metadata_endpoint", imds.url).returncode == 0
    assert portal("config", "set", "aws.poll_interval_s", "0.5").returncode == 0
    shown = portal("config", "show").stdout
    assert re.search(r"aws\.poll_interval_s\s+0\.5\s+\S*config\.toml line \d+", shown), shown
    assert re.search(r"aws\.slow_interval_s\s+5\s+default", shown), shown
    job = portal("run", "--detach", "--name", "spot", "count.py", "5").stdout.strip()
    portal.wait_for_output(job, "step 3 ")
    watching = [e for e in _events(portal, job) if e["kind"] == "watching"]
    assert watching and "aws" in watching[0]["data"]["sources"], watching
    imds.preempt(in_seconds=120)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    assert "notice from aws (aws, preemption)" in portal("explain", job).stdout


@pytest.mark.one_python
def test_the_checks_warning_on_a_gcp_spot_vm_says_its_30_s_notice(portal: PortalCli) -> None:
    """The warning follows the machine (the spec: policy spot on a spot machine): on a GCP Spot
    VM it names the VM's 30 s notice, and explain files it under policy spot; on this machine
    (on-demand, test_carry.py) it names no notice and is the checkpoint policy's."""
    portal.env["PORTAL_CAPTURE_PROBE_EVERY_S"] = "0.5"
    with FakeGCEMetadata(machine_type="n2-standard-4") as gce:
        portal.env["GCE_METADATA_HOST"] = gce.host
        job = portal("run", "--detach", "--name", "g", "holds_digest.py").stdout.strip()
        assert portal("wait", job, "--timeout", "60").stdout.strip() == "done"
    warnings = [e for e in _events(portal, job) if e["kind"] == "carry-warning"]
    assert len(warnings) == 1, warnings
    assert "If this spot machine is reclaimed (its notice is 30 s), its work" in str(
        warnings[0]["message"]
    )
    assert warnings[0]["data"]["purchase"] == "spot"
    assert "warn (spot) at" in portal("explain", job).stdout


@pytest.mark.one_python
def test_an_azure_event_is_acknowledged_once_the_checkpoint_is_stored(portal: PortalCli) -> None:
    """Azure's Scheduled Events: once the job's checkpoint is stored the node tells Azure the VM
    is ready (StartRequests), so the eviction may start now rather than at its NotBefore."""
    with FakeAzureMetadata() as azure:
        portal.env["PORTAL_AZURE_METADATA_ENDPOINT"] = azure.url
        job = portal("run", "--detach", "--name", "az", "count.py", "5").stdout.strip()
        portal.wait_for_output(job, "step 2 ")
        event_id = azure.preempt(in_seconds=30)
        assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
        assert azure.acknowledged == [event_id]
    kinds = [e["kind"] for e in _events(portal, job)]
    assert kinds.index("suspended") < kinds.index("acknowledged"), kinds
    told = next(e for e in _events(portal, job) if e["kind"] == "acknowledged")
    assert str(told["message"]).startswith("told azure the job is saved (checkpoint ")


def _events(portal: PortalCli, job: str) -> list[dict[str, object]]:
    import contextlib
    import json
    import sqlite3

    with contextlib.closing(sqlite3.connect(portal.home / "portal.db")) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute("SELECT * FROM events WHERE job_id = ? ORDER BY seq", (job,)).fetchall()
    return [{**dict(r), "data": json.loads(r["data"] or "{}")} for r in rows]
