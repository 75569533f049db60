from __future__ import annotations

import pytest

from portal.core.errors import (
    InvalidArgumentError,
    InvalidSettingError,
    PluginError,
    PortalError,
    PreemptedError,
    RunError,
)


def test_preempted_is_a_run_error_with_stable_code() -> None:
    err = PreemptedError(run_id="run-7", details={"provider": "aws"})
    assert isinstance(err, RunError)
    assert err.code == PreemptedError.code == "PREEMPTED"
    assert err.run_id == "run-7"
    assert err.details == {"provider": "aws"}
    assert "run-7" in str(err)
    assert err.to_dict() == {
        "code": "PREEMPTED",
        "message": str(err),
        "details": {"provider": "aws"},
        "run_id": "run-7",
    }


def test_run_error_defaults() -> None:
    err = RunError()
    assert err.run_id is None and err.details == {}
    assert err.code == "RUN_ERROR"


def test_details_are_copied() -> None:
    details = {"a": 1}
    err = RunError("x", details=details)
    details["a"] = 2
    assert err.details == {"a": 1}


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (InvalidArgumentError, "INVALID_ARGUMENT"),
        (InvalidSettingError, "INVALID_SETTING"),
        (PluginError, "PLUGIN_ERROR"),
    ],
)
def test_codes(cls: type[PortalError], code: str) -> None:
    assert cls.code == code
    assert isinstance(cls("m"), PortalError)


def test_invalid_argument_is_a_value_error_but_a_user_error_is_not_portal() -> None:
    assert isinstance(InvalidArgumentError("bad"), ValueError)
    assert not isinstance(ValueError("user"), PortalError)
