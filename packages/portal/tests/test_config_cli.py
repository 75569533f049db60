"""``portal config``: every setting from one stack of layers, shown with where it came from,
set by name; and a setting in a file reaches the jobs the CLI and the node run."""

from __future__ import annotations

import json
import tomllib

from conftest import PortalCli


def _show(portal: PortalCli) -> dict[str, tuple[object, str]]:
    done = portal("config", "show", "--json")
    assert done.returncode == 0, done.stderr
    return {row["setting"]: (row["value"], row["from"]) for row in json.loads(done.stdout)}


def test_set_writes_the_file_and_show_names_each_layer(portal: PortalCli) -> None:
    assert portal("config", "set", "spot.move_when_over", "false").returncode == 0
    assert portal("config", "set", "checkpoint_every", "10m").returncode == 0
    assert portal("config", "set", "capture_probe", "full", "--project").returncode == 0
    config = tomllib.loads((portal.home / "config.toml").read_text())
    assert config == {"spot": {"move_when_over": False}, "checkpoint_every": "10m"}
    assert tomllib.loads((portal.workdir / "portal.toml").read_text()) == {"capture_probe": "full"}

    shown = _show(portal)
    assert shown["spot.move_when_over"] == (False, f"{portal.home / 'config.toml'} line 4")
    assert shown["checkpoint_every"] == (600.0, f"{portal.home / 'config.toml'} line 1")
    assert shown["capture_probe"] == ("full", f"{portal.workdir / 'portal.toml'} line 1")
    assert shown["cloud"] == ("local", "default")
    portal.env["PORTAL_CAPTURE_PROBE"] = "off"
    assert _show(portal)["capture_probe"] == ("off", "environment variable PORTAL_CAPTURE_PROBE")
    said = portal("config", "set", "capture_probe", "on", "--project")
    assert "capture_probe comes from environment variable PORTAL_CAPTURE_PROBE here" in said.stdout


def test_a_bad_key_or_value_is_refused_and_nothing_is_written(portal: PortalCli) -> None:
    wrong = portal("config", "set", "spot.move_when_ever", "false")
    assert wrong.returncode == 64 and "unknown setting 'spot.move_when_ever'" in wrong.stderr
    bad = portal("config", "set", "notice_default_s", "soon")
    assert bad.returncode == 64 and "setting notice_default_s has value 'soon'" in bad.stderr
    assert "expected a number" in bad.stderr
    assert not (portal.home / "config.toml").exists()
    secret = portal("config", "set", "control_token", "t0ps3cret")
    assert secret.returncode == 0 and "t0ps3cret" not in secret.stdout
    assert (portal.home / "config.toml").stat().st_mode & 0o077 == 0
    assert _show(portal)["control_token"][0] == "(set)"


def test_a_setting_in_the_users_file_reaches_the_job(portal: PortalCli) -> None:
    """``capture_probe = off`` in config.toml: the node takes no checkpoint check (it ran one
    on every start before, whatever the file said)."""
    (portal.home).mkdir(parents=True, exist_ok=True)
    (portal.home / "config.toml").write_text('capture_probe = "off"\n')
    job = portal("run", "--detach", "holds_digest.py").stdout.strip()
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "done"
    status = json.loads(portal("status", job, "--json").stdout)
    assert status["carry"]["ok"] is None  # never checked

    (portal.home / "config.toml").write_text("capture_probe = \n")
    broken = portal("jobs")
    assert broken.returncode == 64
    assert f"{portal.home / 'config.toml'} is not valid TOML" in broken.stderr
