"""Python-level signal handlers the program installed (``signal.signal``), carried to the
resumed process.

A handler is carried when the program changed it from what the process started with: a
function of its own (pickled like any other of its values), ``SIG_IGN`` or ``SIG_DFL``. Three
kinds are left alone:

* the signals Portal's runtime listens on itself: ``SIGUSR1`` (it wakes the paused thread) and
  ``SIGIO`` (the node's messages). A program that takes one of them over stops Portal from
  hearing its node; the resumed process starts with Portal's again.
* Portal's own handlers (its ``SIGTERM``, which asks for a pause): they are installed afresh by
  the resumed runtime.
* handlers installed from C (``signal.getsignal`` returns ``None``): Python cannot re-install
  them; the library that set them does so again when it is imported.

``SIGTERM`` is the program's when it installed a handler for it: that handler ran instead of
Portal's pause before the checkpoint (the program chose to handle the signal itself), and it does
so after the resume too. The runtime installs its own handlers after the state is restored, so
the program's ``SIGTERM`` handler is put back once more afterwards
(:func:`reinstall_after_arming`, which the runtime calls).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any, Final

from portal.capture.restoring import PortalMethod
from portal.core.specs import CaptureExtensionSpec

__all__ = ["RUNTIME_SIGNALS", "SignalHandlers", "reinstall_after_arming", "specs"]

#: Signals whose handlers the runtime owns: never carried, never restored.
RUNTIME_SIGNALS: Final = frozenset({signal.SIGUSR1, signal.SIGIO})
#: Signals the runtime installs a handler for while arming (after the state is restored).
_ARMED_SIGNALS: Final = frozenset({signal.SIGTERM})
_UNCATCHABLE: Final = frozenset({signal.SIGKILL, signal.SIGSTOP})

Handler = Callable[[int, Any], Any] | int | signal.Handlers | None

_AFTER_ARMING: dict[int, Handler] = {}  # runtime singleton: handlers the arming would replace


def _carried_signals() -> list[signal.Signals]:
    return sorted(
        (s for s in signal.valid_signals() if isinstance(s, signal.Signals)),
        key=int,
    )


def _is_portals(handler: Handler) -> bool:
    """A bound method of the runtime's own objects (its SIGTERM, a control channel), or one
    that a library saved and put back after a resume (:class:`PortalMethod`)."""
    if isinstance(handler, PortalMethod):
        return True
    owner = getattr(handler, "__self__", None)
    return owner is not None and type(owner).__module__.startswith(
        ("portal.capture", "portal.runtime")
    )


class SignalHandlers:
    """The program's handlers, relative to the baseline read when the runtime loads plugins."""

    def __init__(self) -> None:
        self.baseline: dict[int, Handler] = {}
        for signum in _carried_signals():
            if signum in _UNCATCHABLE:
                continue
            try:
                self.baseline[signum] = signal.getsignal(signum)
            except (OSError, ValueError):
                continue

    def capture(self) -> dict[str, Handler] | None:
        changed: dict[str, Handler] = {}
        for signum, start in self.baseline.items():
            if signum in RUNTIME_SIGNALS:
                continue
            handler = signal.getsignal(signum)
            if handler is None or handler == start or _is_portals(handler):
                continue
            changed[signal.Signals(signum).name] = handler
        return changed or None

    def restore(self, changed: dict[str, Handler] | None) -> None:
        for name, handler in (changed or {}).items():
            signum = getattr(signal, name, None)
            if not isinstance(signum, signal.Signals) or signum in RUNTIME_SIGNALS:
                continue  # a signal this machine lacks, or one the runtime owns
            signal.signal(signum, handler)
            if signum in _ARMED_SIGNALS:
                _AFTER_ARMING[signum] = handler


def reinstall_after_arming() -> None:
    """Called by the runtime once its own handlers are installed in a resumed process: the
    program's handlers for the same signals win again, as they did before the checkpoint."""
    while _AFTER_ARMING:
        signum, handler = _AFTER_ARMING.popitem()
        signal.signal(signum, handler)


def specs() -> list[CaptureExtensionSpec]:
    handlers = SignalHandlers()
    return [
        CaptureExtensionSpec(
            name="signal_handlers",
            capture=handlers.capture,
            restore=handlers.restore,
            description="Python-level signal handlers the program installed",
        )
    ]
