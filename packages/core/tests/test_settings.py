from __future__ import annotations

from pathlib import Path

import pytest

from portal.core.errors import InvalidSettingError
from portal.core.settings import Settings


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
