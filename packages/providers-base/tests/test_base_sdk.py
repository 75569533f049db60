"""A provider's cloud SDK missing where the control plane runs: said once, with what to install."""

from __future__ import annotations

import logging

import pytest

from portal.providers.base.sdk import sdk_missing


def test_a_missing_sdk_is_said_once_with_the_extra_to_install(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="portal.providers")
    for _ in range(3):
        try:
            import portal_no_such_cloud_sdk  # type: ignore[import-not-found]  # noqa: F401
        except ImportError as exc:
            sdk_missing(exc, api="Acme's API", extra="portal-providers-acme[api]")
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "cannot ask Acme's API: portal_no_such_cloud_sdk is not installed; install "
        "portal-providers-acme[api] where the control plane runs"
    ]
