"""Capture's own serializers and capture extensions pass the contracts a third party's must
pass (``portal.testing``): their reducers are found as the engine finds them, their rebuild
functions by name, and what they make loads in a new interpreter; an extension's capture
changes nothing and its restore brings back what it saw, by pickle too."""

from __future__ import annotations

import decimal
import logging
import random
import struct
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from portal.capture.extensions import logging_state, rng, settings, stdlib_objects
from portal.core.specs import CaptureExtensionSpec, SerializerSpec
from portal.testing import CaptureExtensionContract, SerializerContract


def _spec(specs: Sequence[Any], name: str) -> Any:
    return next(s for s in specs if s.name == name)


class TestStructs(SerializerContract):
    def make_spec(self) -> SerializerSpec:
        return _spec(stdlib_objects.serializer_specs(), "capture_structs")

    def make_values(self) -> Sequence[object]:
        return [struct.Struct("<iqd"), struct.Struct("!4sH")]

    def same(self, original: Any, restored: Any) -> bool:
        return bool(original.format == restored.format and original.size == restored.size)


class TestLocks(SerializerContract):
    def make_spec(self) -> SerializerSpec:
        return _spec(stdlib_objects.serializer_specs(), "capture_locks")

    def make_values(self) -> Sequence[object]:
        return [threading.Lock(), threading.RLock()]

    def make_refused(self) -> Sequence[object]:
        held = threading.Lock()
        held.acquire()  # held at the pause: the pause waits, naming it
        return [held]

    def same(self, original: Any, restored: Any) -> bool:
        return bool(restored.acquire(blocking=False))  # unlocked, as it was


class TestLogHandlers(SerializerContract):
    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.folder = tmp_path

    def make_spec(self) -> SerializerSpec:
        return _spec(logging_state.serializer_specs(), "capture_logging")

    def make_values(self) -> Sequence[object]:
        handler = logging.FileHandler(self.folder / "train.log", mode="w", delay=True)
        handler.setLevel(logging.WARNING)
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        return [handler]

    def same(self, original: Any, restored: Any) -> bool:
        return bool(
            restored.baseFilename == original.baseFilename
            and restored.mode == "a"  # a resumed log goes on, never truncated
            and restored.level == original.level
            and restored.formatter._fmt == original.formatter._fmt
        )


class TestRandomGlobal(CaptureExtensionContract):
    def make_spec(self) -> CaptureExtensionSpec:
        return _spec(rng.specs(), "random_global")

    def change(self) -> None:
        random.random()

    def reset(self) -> None:
        random.seed()  # as a new process seeds it

    def observe(self) -> object:
        return random.getstate()


class TestRecursionLimit(CaptureExtensionContract):
    start = sys.getrecursionlimit()

    def make_spec(self) -> CaptureExtensionSpec:
        return _spec(settings.specs(), "recursion_limit")

    def change(self) -> None:
        sys.setrecursionlimit(self.start + 123)

    def reset(self) -> None:
        sys.setrecursionlimit(self.start)

    def observe(self) -> object:
        return sys.getrecursionlimit()


class TestDecimalContext(CaptureExtensionContract):
    def make_spec(self) -> CaptureExtensionSpec:
        return _spec(settings.specs(), "decimal_context")

    def change(self) -> None:
        decimal.getcontext().prec += 7
        decimal.getcontext().rounding = decimal.ROUND_DOWN

    def reset(self) -> None:
        decimal.setcontext(decimal.Context())  # a new thread's context: the default's copy

    def observe(self) -> object:
        context = decimal.getcontext()
        return (context.prec, context.rounding, dict(context.traps))
