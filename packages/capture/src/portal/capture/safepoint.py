"""Line events for the code that has safe points (the user's and its libraries') on the main
thread, switched on only while a pause is wanted.

Always-on tracing costs a program 2.5-4x; so arming Portal installs nothing but a signal handler,
and this switch turns line events on when a pause is requested and off again when it is taken,
cancelled or abandoned. CPython 3.11 has only ``sys.settrace`` (per thread: it must be switched
from the main thread, i.e. from a signal handler, and the frames already running need their
``f_trace`` set). 3.12+ has ``sys.monitoring``: the callback disables itself for every code
location that can never be a safe point (Portal's own, a generator's, a comprehension's, code
with no source file), so those run at full speed even while a pause is pending.

A pending pause that meets a frame no line inside of which can be a safe point (a running
generator, a frame called through C such as ``list(gen())``: see
:func:`portal.capture.snapshot.outermost_obstacle`) *narrows* the events to the frames outside
it until one of them reaches a line: a program that runs for seconds inside such a call pays
(almost) nothing for the pause it cannot take there, and the pause is taken at the first line
of an outer frame, however short the gap between two such calls. A frame the outer one calls
within the same line, after the obstacle has returned, has no line events until that outer
frame reaches its next line.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from types import CodeType, FrameType
from typing import Any

__all__ = ["LineEvents"]

_TOOL_NAME = "portal"
_monitoring: Any = None
if sys.version_info >= (3, 12):
    _monitoring = sys.monitoring


class LineEvents:
    """Calls ``on_line(frame)`` at each new line of user code on the main thread while enabled.

    :param has_safe_points: which code objects have safe points (the user's, and libraries').
    :param on_line: the callback; it runs with tracing suspended (no nested events).
    """

    def __init__(
        self, has_safe_points: Callable[[CodeType], bool], on_line: Callable[[FrameType], None]
    ) -> None:
        self._has_safe_points = has_safe_points
        self._on_line = on_line
        self._main = threading.main_thread().ident
        self.enabled = False
        #: Events come only from the frames outside an obstacle (see :meth:`narrow`).
        self.narrowed = False
        self._narrowed_codes: list[CodeType] = []  # 3.12+: those frames' code, local events
        self._tool: int | None = None
        self._previous_trace: Any = None

    # -- 3.12+: sys.monitoring --------------------------------------------------------------

    def _claim_tool(self) -> int:
        if self._tool is None:
            monitoring = _monitoring
            for tool in (4, 3, 5, 2):
                if monitoring.get_tool(tool) is None:
                    monitoring.use_tool_id(tool, _TOOL_NAME)
                    monitoring.register_callback(tool, monitoring.events.LINE, self._monitor_line)
                    self._tool = tool
                    break
            else:
                raise RuntimeError("no free sys.monitoring tool id for Portal's pause")
        return self._tool

    def _monitor_line(self, code: CodeType, line: int) -> Any:
        if not self._has_safe_points(code):
            return _monitoring.DISABLE  # this location never has a safe point
        if threading.get_ident() != self._main or not self.enabled:
            return None
        self._on_line(sys._getframe(1))
        return None

    # -- 3.11: sys.settrace -----------------------------------------------------------------

    def _trace_call(self, frame: FrameType, event: str, arg: Any) -> Any:
        if not self.enabled:  # switched off from another thread: clean up here, on main
            sys.settrace(self._previous_trace)
            return None
        if event == "call" and not self.narrowed and self._has_safe_points(frame.f_code):
            return self._trace_local
        return None

    def _trace_local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if self.enabled and event == "line":
            self._on_line(frame)
        # None keeps the frame's f_trace as it is now: a callback that narrowed the events may
        # have cleared it.
        return None

    # -- switching --------------------------------------------------------------------------

    def prepare(self) -> None:
        """Claim the monitoring tool ahead (3.12+), so switching on is one call. Costs nothing:
        no event is set until :meth:`enable`."""
        if sys.version_info >= (3, 12):
            self._claim_tool()
        # Switch on and off once: first-call costs (instrumentation, caches) are paid now
        # rather than between a notice and its safe point.
        self.enable(None)
        self.disable()

    def enable(self, frame: FrameType | None) -> None:
        """Switch on. On 3.11 call this on the main thread, with the frame it interrupted."""
        if self.enabled:
            return
        self.enabled = True
        if sys.version_info >= (3, 12):
            _monitoring.set_events(self._claim_tool(), _monitoring.events.LINE)
            return
        self._previous_trace = sys.gettrace()
        sys.settrace(self._trace_call)
        while frame is not None:  # frames already running get their own tracer
            if self._has_safe_points(frame.f_code):
                frame.f_trace = self._trace_local
                frame.f_trace_lines = True
            frame = frame.f_back

    def narrow(self, outer: Sequence[FrameType], inner: Sequence[FrameType]) -> None:
        """While enabled, take line events only from the frames ``outer`` (3.12+: from their
        code) until :meth:`widen`; ``inner`` are the frames on the stack inside the obstacle,
        which lose theirs (main thread, from the callback)."""
        if not self.enabled:
            return
        self.widen()
        self.narrowed = True
        if sys.version_info >= (3, 12):
            tool = self._claim_tool()
            _monitoring.set_events(tool, 0)
            for code in {id(f.f_code): f.f_code for f in outer}.values():
                _monitoring.set_local_events(tool, code, _monitoring.events.LINE)
                self._narrowed_codes.append(code)
            return
        for f in inner:
            f.f_trace = None
        for f in outer:
            f.f_trace = self._trace_local
            f.f_trace_lines = True

    def widen(self) -> None:
        """Line events from all the user's code again (main thread)."""
        if not self.narrowed:
            return
        self.narrowed = False
        if sys.version_info >= (3, 12) and self._tool is not None:
            for code in self._narrowed_codes:
                _monitoring.set_local_events(self._tool, code, 0)
            self._narrowed_codes.clear()
            if self.enabled:
                _monitoring.set_events(self._tool, _monitoring.events.LINE)

    def disable(self) -> None:
        """Switch off (3.11: on the main thread)."""
        if not self.enabled:
            return
        self.enabled = False
        if sys.version_info >= (3, 12) and self.narrowed:
            self.widen()  # clears the local events; global ones go off below
        self.narrowed = False
        if sys.version_info >= (3, 12):
            if self._tool is not None:
                _monitoring.set_events(self._tool, 0)
            return
        if threading.get_ident() == self._main:
            sys.settrace(self._previous_trace)
            self._previous_trace = None
        # else: the global tracer removes itself at the main thread's next call event

    def close(self) -> None:
        self.disable()
        if sys.version_info >= (3, 12) and self._tool is not None:
            _monitoring.register_callback(self._tool, _monitoring.events.LINE, None)
            _monitoring.free_tool_id(self._tool)
            self._tool = None
