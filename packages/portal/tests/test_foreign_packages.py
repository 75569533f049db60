"""Another project's ``portal`` (the distributed-systems library on the package index, which owns
the same import name) installed where Portal runs: the ``portal`` command names it and the way out,
never ``No module named 'portal.cli'``.

The intruder is the real wheel, downloaded from the registry at test time into a cache outside
the repository (the test is skipped, with the reason, when the registry cannot be reached) and
unpacked as pip lays a wheel out: its package and its ``.dist-info``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from portal.testing.registry import unpacked_wheel

FOREIGN_PORTAL = ("portal", "3.8.3")


def _portal_command() -> str:
    command = Path(sys.executable).with_name("portal")
    assert command.exists(), f"the portal command is not installed beside {sys.executable}"
    return str(command)


def test_another_projects_portal_package_is_named_with_the_way_out(tmp_path: Path) -> None:
    site = unpacked_wheel(*FOREIGN_PORTAL, tmp_path / "site")
    assert (site / "portal" / "__init__.py").exists()
    env = {**os.environ, "PYTHONPATH": str(site), "PORTAL_HOME": str(tmp_path / "home")}

    done = subprocess.run(
        [_portal_command(), "jobs"], env=env, capture_output=True, text=True, check=False
    )

    assert done.returncode == 69, done.stderr
    assert "Traceback" not in done.stderr
    assert "No module named" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("portal: the import name `portal` belongs to another project here ")
    assert "(portal 3.8.3, at " in line
    assert "not to Portal's portal-spot" in line
    assert "Remove it (`pip uninstall portal`)" in line
    assert "`pip install --force-reinstall portal-spot`" in line
    assert line.endswith("[FOREIGN_PACKAGE]")


def test_a_portal_folder_that_is_no_distribution_is_told_too(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "portal").mkdir(parents=True)
    (site / "portal" / "__init__.py").write_text("raise SystemExit('imported')\n")
    env = {**os.environ, "PYTHONPATH": str(site)}

    done = subprocess.run(
        [_portal_command(), "--version"], env=env, capture_output=True, text=True, check=False
    )

    assert done.returncode == 69, done.stderr
    assert "imported" not in done.stderr  # the check never runs another project's code
    assert "(not an installed distribution, at " in done.stderr
    assert "delete that folder or take it off PYTHONPATH" in done.stderr


def test_portal_alone_says_nothing(tmp_path: Path) -> None:
    done = subprocess.run(
        [_portal_command(), "--version"],
        env={**os.environ, "PORTAL_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("portal 0.")
    assert done.stderr == ""
