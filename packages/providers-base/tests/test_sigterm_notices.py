"""The SIGTERM notice source: contract, chaining, grace, threads."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from portal.core.errors import InvalidSettingError, PortalError
from portal.core.plugins import Plugins, get_plugin_manager
from portal.core.specs import NoticeSource, NoticeSourceContext
from portal.providers.sigterm import SignalNoticeSource, detect_platform
from portal.testing import FakeClock, NoticeSourceContract


def _send_sigterm(source: SignalNoticeSource) -> None:
    # Never send SIGTERM to the test process without a handler of ours in place.
    assert source.installed and signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture(autouse=True)
def _restore_sigterm() -> Iterator[None]:
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


class TestSignalNoticeContract(NoticeSourceContract):
    def make_source(self) -> NoticeSource:
        return SignalNoticeSource(enabled=True, grace_s=90.0)

    def announce(self, source: NoticeSource, seconds: float) -> None:
        assert isinstance(source, SignalNoticeSource)
        source.grace_s = seconds  # SIGTERM states no deadline: the grace period sets it
        _send_sigterm(source)


def test_deadline_is_arrival_plus_grace_on_the_injected_clock() -> None:
    clock = FakeClock(start=1_000.0)
    source = SignalNoticeSource(enabled=True, grace_s=25.0, clock=clock, platform="kubernetes")
    try:
        _send_sigterm(source)
        (notice,) = source.poll(1.0)
        assert (notice.seen_at, notice.deadline) == (1_000.0, 1_025.0)
        assert notice.provider == "kubernetes" and notice.raw["signal"] == "SIGTERM"
        _send_sigterm(source)  # a second SIGTERM is the same notice, not a new one
        assert source.poll(0.05) == []
    finally:
        source.close()


def test_chains_to_the_previous_python_handler() -> None:
    calls: list[int] = []

    def previous(signum: int, frame: FrameType | None) -> None:
        calls.append(signum)

    signal.signal(signal.SIGTERM, previous)
    source = SignalNoticeSource(enabled=True)
    try:
        _send_sigterm(source)
        assert len(source.poll(1.0)) == 1
        assert calls == [signal.SIGTERM]
    finally:
        source.close()
    assert signal.getsignal(signal.SIGTERM) is previous  # put back on close


def test_does_not_run_the_default_action() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    source = SignalNoticeSource(enabled=True)
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # with SIG_DFL chained, this process would die
        assert len(source.poll(1.0)) == 1
    finally:
        source.close()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_close_leaves_a_handler_installed_over_ours() -> None:
    source = SignalNoticeSource(enabled=True)
    seen: list[int] = []

    def later(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    signal.signal(signal.SIGTERM, later)
    source.close()
    assert signal.getsignal(signal.SIGTERM) is later
    source.close()  # idempotent


def test_poll_from_another_thread_wakes_on_the_signal() -> None:
    source = SignalNoticeSource(enabled=True)
    got: list[float] = []

    def watch() -> None:
        start = time.monotonic()
        if source.poll(5.0):
            got.append(time.monotonic() - start)

    thread = threading.Thread(target=watch)
    thread.start()
    try:
        time.sleep(0.1)
        _send_sigterm(source)
        thread.join(5)
        assert got and got[0] < 1.0
    finally:
        thread.join(5)
        source.close()


def test_built_off_the_main_thread_it_says_how_to_install() -> None:
    made: list[SignalNoticeSource] = []
    thread = threading.Thread(target=lambda: made.append(SignalNoticeSource(enabled=True)))
    thread.start()
    thread.join()
    (source,) = made
    try:
        assert not source.installed
        with pytest.raises(PortalError, match="main thread"):
            source.poll(0)
        source.install()  # from the main thread it works
        assert source.installed and source.poll(0) == []
    finally:
        source.close()


def test_not_applicable_installs_nothing() -> None:
    before = signal.getsignal(signal.SIGTERM)
    source = SignalNoticeSource(platform=None)
    try:
        assert source.detect() is False and not source.installed
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        source.close()


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "kubernetes"),
        ({"SLURM_JOB_ID": "42"}, "slurm"),
        ({}, None),
    ],
)
def test_detects_kubernetes_and_slurm_from_the_given_environ(
    environ: dict[str, str], expected: str | None
) -> None:
    assert detect_platform(environ) == expected


def test_context_settings_and_environ() -> None:
    ctx = NoticeSourceContext(environ={"SLURM_JOB_ID": "7", "PORTAL_SIGTERM_GRACE_S": "45"})
    source = SignalNoticeSource.from_context(ctx)
    try:
        assert source.detect() and source.platform == "slurm" and source.grace_s == 45.0
    finally:
        source.close()
    ctx = NoticeSourceContext(
        settings={"sigterm.notices": "false", "sigterm.grace_s": 10},
        environ={"KUBERNETES_SERVICE_HOST": "x"},
    )
    source = SignalNoticeSource.from_context(ctx)
    try:
        assert not source.detect() and source.grace_s == 10.0
    finally:
        source.close()


@pytest.mark.parametrize("bad", ["soon", "0", "-5"])
def test_a_bad_grace_is_refused_with_the_setting_named(bad: str) -> None:
    with pytest.raises(InvalidSettingError, match="PORTAL_SIGTERM_GRACE_S"):
        SignalNoticeSource.from_context(
            NoticeSourceContext(environ={"PORTAL_SIGTERM_GRACE_S": bad})
        )


def test_registers_as_a_plugin_through_its_entry_point() -> None:
    plugins = Plugins(get_plugin_manager(environ={}))
    assert plugins.distribution_of("sigterm") == "portal-providers-base"
    spec = plugins.notice_source("sigterm")
    source = spec.factory(NoticeSourceContext())
    try:
        assert isinstance(source, NoticeSource) and source.detect() is False
    finally:
        source.close()
