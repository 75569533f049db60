from __future__ import annotations

from pathlib import Path

import pluggy
import pytest

from portal.core.errors import InvalidSettingError, PluginError
from portal.core.hookspecs import hookimpl
from portal.core.plugins import Plugins
from portal.core.settings import (
    Settings,
    gib,
    parse_duration,
    positive_float,
    seconds,
    secret_settings,
    setting_names,
    text,
)
from portal.core.specs import SettingSpec


def test_defaults(tmp_path: Path) -> None:
    s = Settings.load(environ={"PORTAL_HOME": str(tmp_path)})
    assert s.home == tmp_path
    assert s.storage_url == (tmp_path / "store").as_uri()
    assert s.capture_probe == "on"
    assert s.capture_probe_every_s == 600.0
    assert s.notice_default_s == 120.0
    assert s.spot_move_when_over is True


def test_environment_wins_over_values() -> None:
    s = Settings.load(
        {"capture_probe": "off", "capture_probe_every_min": 2, "spot.move_when_over": "false"},
        environ={"PORTAL_CAPTURE_PROBE": "full", "PORTAL_CAPTURE_PROBE_EVERY_S": "30"},
    )
    assert s.capture_probe == "full"
    assert s.capture_probe_every_s == 30.0
    assert s.spot_move_when_over is False


def test_bad_value_names_setting_value_origin_and_choices() -> None:
    with pytest.raises(InvalidSettingError) as info:
        Settings.load(environ={"PORTAL_CAPTURE_PROBE": "maybe"})
    msg = str(info.value)
    assert "capture_probe" in msg and "'maybe'" in msg
    assert "environment variable PORTAL_CAPTURE_PROBE" in msg and "on, full, off" in msg
    assert info.value.code == "INVALID_SETTING"


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"capture_probe_every_min": -1}, "above 0"),
        ({"capture_probe_every_min": "often"}, "expected a number"),
        ({"spot.move_when_over": "perhaps"}, "true or false"),
        ({"capture_prob": "on"}, "unknown setting 'capture_prob'"),
    ],
)
def test_bad_values(values: dict[str, object], needle: str) -> None:
    with pytest.raises(InvalidSettingError, match=needle):
        Settings.load(values, environ={}, source="settings.toml")


def test_layers_from_defaults_to_environment_each_with_its_origin(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (home / "config.toml").write_text(
        'checkpoint_every = "10m"\nnotice_default_s = 90\n\n[spot]\nmove_when_over = false\n'
    )
    (project / "portal.toml").write_text('notice_default_s = 60\ncapture_probe = "full"\n')
    s = Settings.load(
        {"capture_probe": "off"},
        environ={"PORTAL_HOME": str(home), "PORTAL_CHECKPOINT_EVERY": "5m"},
        source="the job's options",
        project=project,
    )
    assert s.spot_move_when_over is False  # the user's file, in a [spot] table
    assert s.notice_default_s == 60.0  # the project's file over the user's
    assert s.capture_probe == "off"  # the caller's values over both files
    assert s.checkpoint_every == 300.0  # the environment over everything
    origins = {name: origin for name, _, origin in s.explain()}
    assert origins["spot.move_when_over"] == f"{home / 'config.toml'} line 5"
    assert origins["notice_default_s"] == f"{project / 'portal.toml'} line 1"
    assert origins["capture_probe"] == "the job's options"
    assert origins["checkpoint_every"] == "environment variable PORTAL_CHECKPOINT_EVERY"
    assert origins["cloud"] == "default"
    without_project = Settings.load(environ={"PORTAL_HOME": str(home)}, project=False)
    assert without_project.notice_default_s == 90.0


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("capture_probe = 'on'\nbogus = 1\n", "unknown setting 'bogus' in {file} line 2"),
        (
            "[spot]\nmove_when_ever = true\n",
            "unknown setting 'spot.move_when_ever' in {file} line 2",
        ),
        (
            "\n\n[spot]\nmove_when_over = 'perhaps'\n",
            "(from {file} line 4): expected true or false",
        ),
        ("capture_probe = \n", "{file} is not valid TOML"),
    ],
)
def test_a_settings_file_that_is_wrong_is_named_with_its_line(
    tmp_path: Path, text: str, needle: str
) -> None:
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(InvalidSettingError) as info:
        Settings.load(environ={"PORTAL_HOME": str(tmp_path)}, project=False)
    assert needle.format(file=tmp_path / "config.toml") in str(info.value)


def test_a_settings_file_that_is_not_text_is_named(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_bytes(b"\xff\xfe\x00 not text")
    with pytest.raises(InvalidSettingError, match=r"config\.toml is not text"):
        Settings.load(environ={"PORTAL_HOME": str(tmp_path)}, project=False)


class _AcmeSettings:
    """A plugin declaring two settings, as a provider does (``portal_settings``)."""

    @hookimpl
    def portal_settings(self) -> list[SettingSpec]:
        return [
            SettingSpec(
                name="acme.poll_interval_s",
                parse=positive_float,
                default=1.0,
                env="PORTAL_ACME_POLL_S",
                description="seconds between two reads",
            ),
            SettingSpec(name="acme.endpoint", parse=text, description="a test endpoint"),
        ]


def test_a_plugins_settings_join_every_layer(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pm.register(_AcmeSettings(), name="acme")
    plugins = Plugins(pm)
    (tmp_path / "config.toml").write_text("[acme]\nendpoint = 'http://127.0.0.1:1'\n")
    env = {"PORTAL_HOME": str(tmp_path)}
    s = Settings.load(environ=env, project=False, plugins=plugins)
    assert s.values["acme.poll_interval_s"] == 1.0
    assert s.values["acme.endpoint"] == "http://127.0.0.1:1"
    origins = {name: origin for name, _, origin in s.explain()}
    assert origins["acme.endpoint"] == f"{tmp_path / 'config.toml'} line 2"
    assert origins["acme.poll_interval_s"] == "default"
    by_env = Settings.load(environ={**env, "PORTAL_ACME_POLL_S": "2.5"}, plugins=plugins)
    assert by_env.values["acme.poll_interval_s"] == 2.5
    assert setting_names(plugins)[:2] == ["acme.endpoint", "acme.poll_interval_s"]
    # Loaded without them, the same file's plugin key is checked against the installed plugins
    # (none here): refused with its line, and the way out.
    with pytest.raises(InvalidSettingError) as info:
        Settings.load(environ=env, project=False)
    assert f"unknown setting 'acme.endpoint' in {tmp_path / 'config.toml'} line 2" in str(
        info.value
    )
    assert "install the plugin that declares it" in str(info.value)
    # ... and with_plugins loads the same layers again, with the plugin's settings.
    (tmp_path / "config.toml").unlink()
    plain = Settings.load(environ=env, project=False, values={"capture_probe": "off"})
    (tmp_path / "config.toml").write_text("[acme]\npoll_interval_s = 4\n")
    again = plain.with_plugins(plugins)
    assert again.values["acme.poll_interval_s"] == 4.0 and again.capture_probe == "off"


def test_a_plugins_bad_value_is_named_with_its_file_and_line(
    tmp_path: Path, pm: pluggy.PluginManager
) -> None:
    pm.register(_AcmeSettings(), name="acme")
    (tmp_path / "config.toml").write_text("\n[acme]\npoll_interval_s = -3\n")
    with pytest.raises(InvalidSettingError) as info:
        Settings.load(environ={"PORTAL_HOME": str(tmp_path)}, project=False, plugins=Plugins(pm))
    message = str(info.value)
    assert "setting acme.poll_interval_s has value -3" in message
    assert f"(from {tmp_path / 'config.toml'} line 3): expected a finite number above 0" in message


def test_a_plugin_may_not_redeclare_portals_own_setting(pm: pluggy.PluginManager) -> None:
    class Thief:
        @hookimpl
        def portal_settings(self) -> list[SettingSpec]:
            return [SettingSpec(name="capture_probe", parse=text)]

    pm.register(Thief(), name="thief")
    with pytest.raises(PluginError, match="'capture_probe', which is one of Portal's own"):
        Settings.load(environ={}, project=False, plugins=Plugins(pm))


def test_two_plugins_declaring_one_setting_are_refused(pm: pluggy.PluginManager) -> None:
    pm.register(_AcmeSettings(), name="acme")
    pm.register(_AcmeSettings(), name="acme2")
    with pytest.raises(
        PluginError, match=r"two plugins register the setting 'acme\.poll_interval_s'"
    ):
        Plugins(pm).settings()


def test_a_setting_spec_refuses_a_bad_name_or_variable() -> None:
    with pytest.raises(ValueError, match="plugin name"):
        SettingSpec(name="acme poll", parse=text)
    with pytest.raises(ValueError, match="environment variable 'portal_acme'"):
        SettingSpec(name="acme.poll", parse=text, env="portal_acme")


def test_a_library_reading_portals_own_settings_loads_no_plugin(tmp_path: Path) -> None:
    """plugins=False (a job's process reading the store's URL): a file's plugin keys are left to
    their plugins, unchecked; a caller's unknown key is still refused."""
    (tmp_path / "config.toml").write_text("storage_url = 'file:///s'\n[acme]\nendpoint = 'x'\n")
    env = {"PORTAL_HOME": str(tmp_path)}
    s = Settings.load(environ=env, project=False, plugins=False)
    assert s.storage_url == "file:///s" and "acme.endpoint" not in s.values
    with pytest.raises(InvalidSettingError, match=r"unknown setting 'acme\.endpoint'"):
        Settings.load({"acme.endpoint": "x"}, environ=env, project=False, plugins=False)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45", 45.0),
        ("30s", 30.0),
        ("10m", 600.0),
        ("1h30m", 5400.0),
        ("2 days", 172_800.0),
        ("1:30:00", 5400.0),
        ("1.5h", 5400.0),
    ],
)
def test_durations_are_read_as_people_write_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert Settings.load({"checkpoint_every": text}, environ={}).checkpoint_every == seconds


@pytest.mark.parametrize(
    "text", ["", "soon", "0", "-5m", "nan", "1e309", "inf", "0.0001s", "400 days", "1e300"]
)
def test_a_duration_that_is_none_is_refused_with_examples(text: str) -> None:
    with pytest.raises(ValueError, match=r"30s, 10m, 1h30m"):
        parse_duration(text)


def test_a_longer_duration_is_read_where_the_caller_allows_it() -> None:
    assert parse_duration("400 days", at_most=10 * 366 * 86_400) == 400 * 86_400.0


@pytest.mark.parametrize("raw", ["inf", "nan", "-inf", 1e300, "1e400", 0, -1, "x", None])
def test_times_and_sizes_refuse_what_is_not_finite_or_absurd(raw: object) -> None:
    """Issue 41, items 1 and 14: one reader for each, everywhere (flags, settings, files)."""
    with pytest.raises(ValueError, match="at most 31622400 \\(366 days\\)"):
        seconds(raw)
    with pytest.raises(ValueError, match="at most 1048576 \\(a pebibyte\\)"):
        gib(raw)
    if raw not in (1e300,):
        with pytest.raises(ValueError, match=r"finite number above 0|expected a number"):
            positive_float(raw)
    assert seconds("30") == 30.0 and gib(0.5) == 0.5 and seconds(366 * 86_400) == 366 * 86_400


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("notice_default_s", "inf"),
        ("capture_probe_every_s", "1e300"),
        ("capture_probe_every_min", "nan"),
        ("checkpoint_every", "0.0001s"),
    ],
)
def test_settings_of_time_refuse_non_finite_and_absurd_values(name: str, raw: str) -> None:
    with pytest.raises(InvalidSettingError, match=f"setting {name} has value {raw!r}"):
        Settings.load({name: raw}, environ={}, project=False, plugins=False)


def test_a_secret_setting_is_never_printed_in_its_refusal() -> None:
    assert "control_token" in secret_settings()
    with pytest.raises(InvalidSettingError) as refused:
        Settings.load({}, environ={"PORTAL_TOKEN": "s3cr3t\nx"}, project=False, plugins=False)
    assert "a value (a secret, not shown)" in str(refused.value)
    assert "s3cr3t" not in str(refused.value) + repr(refused.value.details)
