"""Calls that C only forwards (``f(*args)``, ``self.method(*args)``: ``CALL_FUNCTION_EX``) are
no obstacle: a pause asked for inside the callee is taken there, at once, not when the call
returns, and the resumed program continues as the plain run does, including a ``try`` around a
forwarded call that catches what the resumed callee raises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import FrameType

import pytest
from _harness import EXIT_PAUSED, plain_run, runtime

from portal.capture import frames, stackdepth


def _ticks(out: bytes) -> list[int]:
    return [int(line.split()[1]) for line in out.splitlines() if line.startswith(b"tick ")]


def test_a_pause_inside_forwarded_calls_is_taken_there_and_resumes_exactly(
    scripts: Path,
) -> None:
    script = scripts / "forwarded_calls.py"
    ckpt = script.with_suffix(".portal")
    plain = plain_run(script)
    assert plain.returncode == 0, plain.stderr.decode()
    cmd = runtime("run", "--checkpoint", str(ckpt), str(script))
    outs: list[bytes] = []
    for _ in range(3):
        done = subprocess.run(cmd, capture_output=True, cwd=scripts, timeout=120, check=False)
        outs.append(done.stdout)
        if done.returncode != EXIT_PAUSED:
            assert done.returncode == 0, done.stderr.decode()
            break
        cmd = runtime("resume", str(ckpt))
    assert len(outs) == 3, b"".join(outs).decode()
    # Each pause is taken at the first safe point after its tick, inside step() or fail(): the
    # process stops before the next tick.
    assert _ticks(outs[0])[-1] == 7
    assert _ticks(outs[1])[-1] == 23
    assert b"".join(outs) == plain.stdout


def _probe(*args: object, **kwargs: object) -> tuple[bool, int | None]:
    callee = sys._getframe()
    caller = callee.f_back
    assert caller is not None
    return frames.direct_caller(callee, caller), frames.forwarded_call_depth(callee, caller)


class _Holder:
    def method(self, *args: object) -> tuple[bool, int | None]:
        callee = sys._getframe()
        caller = callee.f_back
        assert caller is not None
        return frames.direct_caller(callee, caller), frames.forwarded_call_depth(callee, caller)


def test_forwarded_calls_are_told_from_calls_through_c() -> None:
    args, kwargs = (1, 2), {"k": 3}
    holder = _Holder()
    for direct, depth in [_probe(*args), _probe(*args, **kwargs), holder.method(*args)]:
        # Either the interpreter inlined the call, or it forwarded it and the depth is known.
        assert direct or depth is not None
    for item in [0]:  # the loop's iterator lies on the caller's stack, below the call
        direct, depth = _probe(*args)
        assert direct or depth == 1, item
    # A builtin between them (map) is a call through C with state of its own.
    (through_map,) = list(map(_probe, [0]))
    assert through_map == (False, None)


def test_the_stack_depth_walk_settles_every_code_object_of_the_stdlib() -> None:
    import json.decoder

    def codes(code: object) -> list[object]:
        found = [code]
        for const in getattr(code, "co_consts", ()):
            if hasattr(const, "co_code"):
                found += codes(const)
        return found

    source = Path(json.decoder.__file__).read_text()
    for code in codes(compile(source, json.decoder.__file__, "exec")):
        assert stackdepth._depths(code) is not None, code  # type: ignore[arg-type]


@pytest.mark.skipif(sys.gettrace() is not None, reason="the check installs its own tracer")
def test_the_walked_depth_is_the_interpreters_at_every_line() -> None:
    import ctypes

    layout = frames.LAYOUT
    assert layout is not None
    seen: list[tuple[str, int, int | None, int]] = []

    def tracer(frame: FrameType, event: str, arg: object) -> object:
        if event == "line" and frame.f_code is sample.__code__:
            base = frames._iframe(frame)
            top = ctypes.c_int.from_address(base + layout.stacktop).value
            top -= frames.local_slot_count(frame.f_code)
            seen.append(
                (
                    frame.f_code.co_qualname,
                    frame.f_lasti,
                    stackdepth.depth_before(frame.f_code, frame.f_lasti),
                    top,
                )
            )
        return tracer

    def sample() -> int:
        total = 0
        for i in range(3):
            for j in (1, 2):
                try:
                    with open(__file__) as f:
                        total += len(f.readline()) * i * j
                except OSError:
                    total -= 1
                finally:
                    total += 1
        return total + sum(x for x in range(4))

    sys.settrace(tracer)
    try:
        sample()
    finally:
        sys.settrace(None)
    assert seen
    assert all(walked == real for _, _, walked, real in seen), seen
