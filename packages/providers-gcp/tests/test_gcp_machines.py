"""The GCP answer to the lost-job rules' question, through google-auth's real service-account
flow (a signed JWT exchanged for a token) against the Compute Engine fake on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from portal.core.plugins import Plugins
from portal.providers.gcp import plugin
from portal.providers.gcp.machines import SCOPE
from portal.providers.gcp.testing import FakeComputeAPI

pytest.importorskip("google.auth", reason="the api extra (google-auth) is not installed")

PROJECT, ZONE = "portal-test", "us-central1-a"


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeComputeAPI]:
    with FakeComputeAPI() as fake:
        monkeypatch.setenv(
            "GOOGLE_APPLICATION_CREDENTIALS", str(fake.service_account_file(tmp_path))
        )
        # Never the metadata address (google-auth's last resort), never gcloud's own files.
        monkeypatch.setenv("NO_GCE_CHECK", "True")
        monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
        monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
        monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        yield fake


def _ask(api: FakeComputeAPI, name: str, instance_id: str = "42") -> bool | None:
    plugins = Plugins.load(autoload=False)
    plugins.pm.register(plugin, name="gcp")
    facts = {
        "provider": "gcp",
        "project": PROJECT,
        "zone": ZONE,
        "instance_name": name,
        "instance_id": instance_id,
    }
    return plugins.machine_exists("gcp", name, "/h", facts, {"gcp.compute_endpoint": api.url})


def test_a_running_vm_is_there_and_the_call_is_read_only(api: FakeComputeAPI) -> None:
    api.add(PROJECT, ZONE, "vm-1", "42")
    assert _ask(api, "vm-1") is True
    assert api.scopes == [SCOPE]  # the token asked for compute.readonly, and only that


@pytest.mark.parametrize("status", ["TERMINATED", "STOPPING", "STOPPED", "SUSPENDED"])
def test_a_preempted_spot_vm_that_stops_is_gone(api: FakeComputeAPI, status: str) -> None:
    api.add(PROJECT, ZONE, "vm-1", "42", status="RUNNING")
    api.set_status("vm-1", status)
    assert _ask(api, "vm-1") is False


def test_a_deleted_vm_is_gone(api: FakeComputeAPI) -> None:
    api.add(PROJECT, ZONE, "vm-1", "42")
    api.delete("vm-1")
    assert _ask(api, "vm-1") is False


def test_a_new_vm_that_took_the_name_is_not_the_nodes(api: FakeComputeAPI) -> None:
    api.add(PROJECT, ZONE, "vm-1", "43")  # recreated under the same name
    assert _ask(api, "vm-1", instance_id="42") is False


def test_refused_or_missing_credentials_never_say_gone(
    api: FakeComputeAPI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    api.add(PROJECT, ZONE, "vm-1", "42")
    api.refuse_tokens = True  # the account's tokens are no longer accepted: 401
    assert _ask(api, "vm-1") is None
    api.refuse_tokens = False
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    assert _ask(api, "vm-1") is None  # no credentials at all


def test_an_api_that_cannot_be_reached_never_says_gone(api: FakeComputeAPI) -> None:
    api.add(PROJECT, ZONE, "vm-1", "42")
    plugins = Plugins.load(autoload=False)
    plugins.pm.register(plugin, name="gcp")
    facts = {"provider": "gcp", "project": PROJECT, "zone": ZONE, "instance_name": "vm-1"}
    closed = {"gcp.compute_endpoint": "http://127.0.0.1:9"}
    assert plugins.machine_exists("gcp", "vm-1", "/h", facts, closed) is None


def test_other_machines_are_not_gcp_to_answer(api: FakeComputeAPI) -> None:
    plugins = Plugins.load(autoload=False)
    plugins.pm.register(plugin, name="gcp")
    settings = {"gcp.compute_endpoint": api.url}
    assert plugins.machine_exists("aws", "i-1", "/h", {"instance_id": "i-1"}, settings) is None
    # A GCP machine whose node did not say its project, zone and name: cannot tell.
    assert plugins.machine_exists("gcp", "local", "/h", {"zone": ZONE}, settings) is None
    assert api.count() == 0
