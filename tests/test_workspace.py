"""Cross-package checks on the installed distributions (run by nox's integration session)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from portal.core.plugins import Plugins, get_plugin_manager

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_namespace_has_no_init(package: Path) -> None:
    """PEP 420: one stray portal/__init__.py hides every sibling distribution."""
    for shared in ("src/portal/__init__.py", "src/portal/providers/__init__.py"):
        assert not (package / shared).exists(), f"{package.name} ships {shared}"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_every_distribution_imports_side_by_side(package: Path) -> None:
    """Each distribution's module imports from the one shared ``portal`` namespace."""
    special = {"portal": "portal.cli", "bladekit": "bladekit", "ray": "portal.ray_engine"}
    module = special.get(package.name, "portal." + package.name.replace("-", "."))
    __import__(module)
    assert sys.modules[module].__file__


def test_installed_wheels_are_not_the_source_tree() -> None:
    import portal.core

    assert "site-packages" in (portal.core.__file__ or ""), portal.core.__file__


def test_example_plugin_is_discovered_from_its_entry_point() -> None:
    plugins = Plugins(get_plugin_manager(environ={}))
    assert plugins.load_failures == []
    assert "acme" in plugins.notice_sources()
    assert plugins.distribution_of("acme") == "portal-acme-notices"
    # Portal's own sources for one machine come the same way, from their wheel's entry points.
    assert plugins.distribution_of("local") == "portal-providers-base"
    assert plugins.distribution_of("sigterm") == "portal-providers-base"


def test_plugin_autoload_can_be_switched_off() -> None:
    """Off, no plugin is loaded: core registers none of its own (not even Portal's sources)."""
    plugins = Plugins(get_plugin_manager(environ={"PORTAL_DISABLE_PLUGIN_AUTOLOAD": "1"}))
    assert plugins.notice_sources() == {}


def test_import_portal_core_stays_light() -> None:
    code = (
        "import sys, portal.core, portal.core.plugins, portal.core.wire, portal.core.settings;"
        "heavy = {'torch', 'numpy', 'boto3', 'botocore', 's3fs', 'gcsfs', 'adlfs', 'fsspec',"
        " 'cloudpickle', 'cryptography'} & set(sys.modules); print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_storage_plugin_installed_from_examples_holds_checkpoints_and_volumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``examples/portal-acme-storage`` is installed as a wheel: its ``acme://`` scheme works
    wherever Portal takes a storage URL, through the one door (``open_backend``)."""
    from portal.storage import CheckpointStore
    from portal.storage.keys import FileKeyStore
    from portal.storage.volumes import Volume

    plugins = Plugins(get_plugin_manager(environ={}))
    assert "acme" in plugins.storage_backends()
    assert plugins.distribution_of("acme-storage") == "portal-acme-storage"
    monkeypatch.setenv("ACME_STORAGE_ROOT", str(tmp_path / "acme"))
    store = CheckpointStore("acme://bucket/portal", FileKeyStore(str(tmp_path / "home")))
    store.create_job_key("job-1")
    state = bytes(range(256)) * 40_000
    with store.open_writer("job-1") as writer:
        writer.write(state)
        ref = writer.commit()
    assert store.open_reader("job-1").read_all() == state
    assert store.latest_complete("job-1", verify=True).checkpoint_id == ref.checkpoint_id
    assert any((tmp_path / "acme" / "bucket" / "portal").rglob("*"))  # the plugin's objects

    volume = Volume.from_name("data", create_if_missing=True, url="acme://bucket/volumes")
    (volume.mount(tmp_path / "mnt") / "weights.bin").write_bytes(b"w" * 1000)
    volume.commit()
    again = Volume.from_name("data", url="acme://bucket/volumes")
    again.mount(tmp_path / "mnt2")
    again.reload()
    assert (tmp_path / "mnt2" / "weights.bin").read_bytes() == b"w" * 1000


_ADD_APP = """
import bladekit

app = bladekit.app("hello")


@app.function()
def add(a: int, b: int) -> int:
    return a + b
"""


def test_bladekit_runs_are_listed_by_portal_jobs(tmp_path: Path) -> None:
    """bladekit's plugin (its entry point in the ``portal`` group) lists its runs beside
    Portal's jobs: a run made by the real ``bladekit run`` is a row of ``portal jobs``."""
    (tmp_path / "add_app.py").write_text(_ADD_APP)
    env = {**os.environ, "PORTAL_HOME": str(tmp_path / "home")}

    def command(*words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).parent / words[0]), *words[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    done = command("bladekit", "run", "add_app.py::add", "2", "3")
    assert (done.returncode, done.stdout) == (0, "5\n"), done.stderr
    (row,) = json.loads(command("portal", "jobs", "--json").stdout)
    assert (row["source"], row["name"], row["state"]) == ("bladekit", "hello.add", "done")
    assert row["attempts"] == 1 and row["recoveries"] == 0 and row["ended_at"] is not None
    table = command("portal", "jobs").stdout
    assert "hello.add" in table and "bladekit hello::add" in table
    registered = json.loads(command("portal", "plugins", "--json").stdout)["registered"]
    assert ("job listing", "portal-bladekit") in {
        (r["kind"], r["distribution"]) for r in registered
    }
