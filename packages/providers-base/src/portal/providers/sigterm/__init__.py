"""The SIGTERM notice source: Kubernetes and Slurm announce the end of a process with SIGTERM.

Kubernetes sends SIGTERM, then SIGKILL after ``terminationGracePeriodSeconds`` (30 s by default);
Slurm sends SIGTERM (with SIGCONT) at preemption and kills after its ``GraceTime``. Neither says
how long the grace is, so the source is told (``sigterm.grace_s`` / ``PORTAL_SIGTERM_GRACE_S``,
default 30 s) and reports a preemption notice whose deadline is the signal's arrival plus the grace.

The handler is installed in the main thread (Python allows nothing else) when the source is built
there and applies; it records the signal and writes a byte to a pipe, nothing more, because a
signal handler runs between two bytecodes of whatever the main thread was doing and must not take
a lock that code may hold. ``poll`` (from any thread) waits on the pipe. A handler installed before
(a framework's, the job's own) is still called after the signal is recorded; the default action
(terminate now) is not, since taking the notice instead is the point.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import Notice, NoticeKind
from portal.core.errors import InvalidSettingError, PortalError
from portal.core.hookspecs import hookimpl
from portal.core.settings import boolean, seconds
from portal.core.specs import NoticeSourceContext, NoticeSourceSpec, SettingSpec

__all__ = ["GRACE_ENV", "SignalNoticeSource", "detect_platform"]

log = logging.getLogger("portal.notices.sigterm")

SOURCE_NAME = "sigterm"
GRACE_ENV = "PORTAL_SIGTERM_GRACE_S"
ENABLE_ENV = "PORTAL_SIGTERM_NOTICES"
DEFAULT_GRACE_S = 30.0
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def detect_platform(environ: Mapping[str, str]) -> str | None:
    """``kubernetes`` or ``slurm`` when the environment says the process runs under one."""
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if environ.get("SLURM_JOB_ID"):
        return "slurm"
    return None


def _grace_from(context: NoticeSourceContext) -> float:
    raw, where = context.settings.get("sigterm.grace_s"), "setting sigterm.grace_s"
    if raw is None:
        raw, where = context.environ.get(GRACE_ENV), GRACE_ENV
    if raw is None:
        return DEFAULT_GRACE_S
    try:
        return seconds(raw)
    except ValueError as why:
        raise InvalidSettingError(
            f"{where}={raw!r} is not a grace period ({why}): give the seconds between SIGTERM "
            "and the kill (Kubernetes' terminationGracePeriodSeconds, Slurm's GraceTime), e.g. 30"
        ) from None


def _enabled_from(context: NoticeSourceContext) -> bool | None:
    raw = context.settings.get("sigterm.notices", context.environ.get(ENABLE_ENV))
    if raw is None or isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise InvalidSettingError(f"sigterm.notices={raw!r} is not valid: give true or false")


class SignalNoticeSource:
    """Reports a preemption notice when the process gets SIGTERM (or the given signals)."""

    name = SOURCE_NAME

    def __init__(
        self,
        *,
        grace_s: float = DEFAULT_GRACE_S,
        signals: Sequence[int] = (signal.SIGTERM,),
        clock: Clock = SYSTEM_CLOCK,
        platform: str | None = None,
        enabled: bool | None = None,
        install: bool = True,
    ) -> None:
        """``enabled`` forces :meth:`detect` (default: applies under Kubernetes or Slurm, as
        ``platform`` says). With ``install``, the handler is installed now if the source applies;
        otherwise call :meth:`install` from the main thread."""
        if not grace_s > 0:
            raise InvalidSettingError(f"SIGTERM grace period {grace_s!r} s is not valid: give > 0")
        self.grace_s = float(grace_s)
        self.signals = tuple(signals)
        self.clock = clock
        self.platform = platform
        self.enabled = enabled
        self._previous: dict[int, _Handler] = {}
        self._received: list[tuple[int, float]] = []  # appended by the handler only
        self._reported: Notice | None = None
        self._extra_logged = 0
        self._install_error: str | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._closed = False
        if install and self.detect():
            try:
                self.install()
            except PortalError as exc:
                self._install_error = exc.message
                log.warning("%s", exc.message)

    @classmethod
    def from_context(cls, context: NoticeSourceContext) -> SignalNoticeSource:
        return cls(
            grace_s=_grace_from(context),
            clock=context.clock,
            platform=detect_platform(context.environ),
            enabled=_enabled_from(context),
        )

    def detect(self) -> bool:
        """Whether the process runs where SIGTERM announces the end (Kubernetes, Slurm), or the
        source was enabled explicitly (``sigterm.notices`` / ``PORTAL_SIGTERM_NOTICES``)."""
        return self.enabled if self.enabled is not None else self.platform is not None

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def install(self) -> None:
        """Install the handler (main thread only; idempotent)."""
        if self._closed:
            raise PortalError("the SIGTERM notice source is closed")
        if self.installed:
            return
        if threading.current_thread() is not threading.main_thread():
            raise PortalError(
                "the SIGTERM notice source must be installed from the main thread (Python runs "
                "signal handlers there only): build it in the node's main thread, or call "
                "install() from there"
            )
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        self._install_error = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Runs in the main thread between two bytecodes: no locks, no logging, no allocation-
        # heavy work; list.append and os.write are safe here.
        if not self._closed:
            self._received.append((signum, self.clock.now()))
            try:  # noqa: SIM105 - plain try/except: the least work in a signal handler
                os.write(self._wake_w, b"\0")
            except OSError:  # the pipe is full (many signals) or closed: the list has it
                pass
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)

    def poll(self, timeout_s: float = 0.0) -> Sequence[Notice]:
        """The notice, once, after the first signal; waits up to ``timeout_s`` for one."""
        if self._closed:
            return []
        if not self.installed and self._install_error is not None:
            raise PortalError(self._install_error)
        if not self._received and timeout_s > 0:
            try:
                select.select([self._wake_r], [], [], timeout_s)
            except (OSError, ValueError):  # closed from another thread meanwhile
                return []
        self._drain()
        received = list(self._received)
        if not received:
            return []
        if self._reported is not None:
            if len(received) > 1 + self._extra_logged:
                self._extra_logged = len(received) - 1
                log.info("another signal: the notice %s stands", self._reported.id)
            return []
        signum, at = received[0]
        name = signal.Signals(signum).name
        self._reported = Notice(
            id=Notice.derive_id(SOURCE_NAME, os.getpid(), signum, at),
            source=self.name,
            provider=self.platform or SOURCE_NAME,
            kind=NoticeKind.PREEMPTION,
            deadline=at + self.grace_s,
            seen_at=at,
            raw={
                "signal": name,
                "grace_s": self.grace_s,
                "platform": self.platform,
                "pid": os.getpid(),
            },
        )
        log.warning("%s received: preemption notice, deadline in %.0f s", name, self.grace_s)
        return [self._reported]

    def _drain(self) -> None:
        os.set_blocking(self._wake_r, False)
        try:
            while os.read(self._wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def machine_info(self) -> dict[str, str | None]:
        """What a signal tells of the machine: only the platform (no type, no capacity class)."""
        return {
            "provider": self.platform,
            "instance_type": None,
            "capacity": None,
            "region": None,
            "zone": None,
            "pool": None,
        }

    def close(self) -> None:
        """Put the previous handlers back (where ours is still the one installed). Idempotent.

        If another handler was installed over ours meanwhile, it is left alone (it may chain to
        ours, which then only passes signals on to the handler before it).
        """
        if self._closed:
            return
        self._closed = True
        in_main = threading.current_thread() is threading.main_thread()
        for signum, previous in self._previous.items():
            if in_main and signal.getsignal(signum) == self._handle and previous is not None:
                signal.signal(signum, previous)
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


@hookimpl(trylast=True)
def portal_notice_sources() -> list[NoticeSourceSpec]:
    return [
        NoticeSourceSpec(
            name=SOURCE_NAME,
            provider=SOURCE_NAME,
            factory=SignalNoticeSource.from_context,
            description="SIGTERM as a preemption notice (Kubernetes, Slurm), with a grace period",
        )
    ]


@hookimpl
def portal_settings() -> list[SettingSpec]:
    return [
        SettingSpec(
            name="sigterm.grace_s",
            parse=seconds,
            default=DEFAULT_GRACE_S,
            env=GRACE_ENV,
            description="seconds between SIGTERM and the kill (Kubernetes' "
            "terminationGracePeriodSeconds, Slurm's GraceTime)",
        ),
        SettingSpec(
            name="sigterm.notices",
            parse=boolean,
            env=ENABLE_ENV,
            description="take SIGTERM as a notice everywhere (true) or nowhere (false); unset: "
            "under Kubernetes and Slurm",
        ),
    ]
