"""The contracts of capture plugins: serializers (``portal_serializers``: reducers for types)
and capture extensions (``portal_capture_extensions``: process state such as an RNG or a
library's settings).

A checkpoint is read back in *another* process, often on another machine, that has imported
only what the program imports. These tests hold what the capture engine relies on, in that
shape: a reducer is looked up as the engine looks it up (by the type's qualified name, along the
MRO; ``NotImplemented`` leaves the value to pickle), its rebuild function is found by name, and
what it made loads in a new interpreter. They need no part of portal-capture: a plugin's tests
run where only portal-spot-core and this package are installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import pickle
import subprocess
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from portal.core.specs import CaptureExtensionSpec, SerializerSpec, WaitForSafePoint
from portal.testing.contracts import _Contract

__all__ = ["CaptureExtensionContract", "SerializerContract"]


def _resolve(name: str) -> object | None:
    """What a reducer's key names, where its module is loaded (as the engine resolves it)."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        obj: object | None = module
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
        return obj
    return None


class _Pickler(pickle.Pickler):
    """Protocol 5, with the spec's reducers looked up along each value's MRO."""

    def __init__(self, file: io.BytesIO, reducers: Mapping[object, Callable[[Any], Any]]) -> None:
        super().__init__(file, protocol=5)
        self._reducers = reducers

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.GeneratorType):
            reducer = self._reducers.get(obj.gi_code)
            return NotImplemented if reducer is None else reducer(obj)
        for base in type(obj).__mro__:
            reducer = self._reducers.get(base)
            if reducer is not None:
                return reducer(obj)
        return NotImplemented


def _loads_elsewhere(data: bytes, modules: Sequence[str] = ()) -> str:
    """Load ``data`` in a new interpreter (this one's path, nothing imported but ``modules``
    and what unpickling imports); the loaded value's type, or a failure's traceback."""
    script = (
        "import importlib, pickle, sys\n"
        f"for name in {list(modules)!r}: importlib.import_module(name)\n"
        "value = pickle.loads(sys.stdin.buffer.read())\n"
        "print(type(value).__module__ + '.' + type(value).__qualname__)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-c", script], input=data, capture_output=True, env=env, timeout=120
    )
    if done.returncode != 0:
        return done.stderr.decode(errors="replace")[-2000:]
    return done.stdout.decode().strip()


def _qualified(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


class SerializerContract(_Contract):
    """What a serializer plugin's reducers must do. Implement :meth:`make_spec` and
    :meth:`make_values` (values of the registered types, in states worth carrying); override
    :meth:`same` for types without a meaningful ``==`` and :meth:`make_refused` for values the
    reducers must refuse with the way out."""

    def make_spec(self) -> SerializerSpec:
        raise NotImplementedError

    def make_values(self) -> Sequence[object]:
        raise NotImplementedError

    def make_refused(self) -> Sequence[object]:
        """Values the reducers cannot carry (a ``TypeError`` naming the way out) or not yet
        (:class:`~portal.core.specs.WaitForSafePoint`). None by default."""
        return ()

    def same(self, original: object, restored: object) -> bool:
        """Whether ``restored`` carries what ``original`` held (``==`` by default)."""
        return original == restored

    @pytest.fixture
    def spec(self) -> SerializerSpec:
        return self.make_spec()

    @pytest.fixture
    def values(self) -> Sequence[object]:
        made = list(self.make_values())
        assert made, "make_values() gave no value to carry"
        return made

    def _reducers(self, spec: SerializerSpec) -> dict[object, Callable[[Any], Any]]:
        resolved: dict[object, Callable[[Any], Any]] = {}
        for name, reducer in spec.reducers.items():
            target = _resolve(name)
            if isinstance(target, type):
                resolved[target] = reducer
            elif isinstance(target, types.FunctionType):
                resolved[target.__code__] = reducer
        return resolved

    def _dumps(self, spec: SerializerSpec, value: object) -> bytes:
        out = io.BytesIO()
        _Pickler(out, self._reducers(spec)).dump(value)
        return out.getvalue()

    def _reducer_of(self, spec: SerializerSpec, value: object) -> Callable[[Any], Any] | None:
        reducers = self._reducers(spec)
        if isinstance(value, types.GeneratorType):
            return reducers.get(value.gi_code)
        return next((reducers[b] for b in type(value).__mro__ if b in reducers), None)

    def _reduced(
        self, spec: SerializerSpec, values: Sequence[object]
    ) -> Iterator[tuple[object, Any]]:
        """Each value with what its reducer returned, those it declined left out."""
        for value in values:
            reducer = self._reducer_of(spec, value)
            assert reducer is not None, f"no reducer takes a {_qualified(type(value))}"
            rv = reducer(value)
            if rv is not NotImplemented:
                yield value, rv

    def test_keys_are_qualified_names(self, spec: SerializerSpec) -> None:
        """``"package.module.Type"``: the engine resolves a key only once the program has
        imported its module, so registering costs no import."""
        assert spec.reducers, f"{spec.name} registers no reducer"
        for name in spec.reducers:
            parts = name.split(".")
            assert len(parts) >= 2 and all(p.isidentifier() for p in parts), (
                f"reducer key {name!r} is not a qualified name (module.Type)"
            )

    def test_every_value_has_a_reducer(
        self, spec: SerializerSpec, values: Sequence[object]
    ) -> None:
        for value in values:
            assert self._reducer_of(spec, value) is not None, (
                f"no reducer of {spec.name} takes a {_qualified(type(value))} (its key resolves "
                "to no type of that value's MRO)"
            )

    def test_reducers_give_a_reduce_tuple_or_decline(
        self, spec: SerializerSpec, values: Sequence[object]
    ) -> None:
        for value, rv in self._reduced(spec, values):
            assert isinstance(rv, tuple) and 2 <= len(rv) <= 6, (
                f"the reducer of {_qualified(type(value))} returned {type(rv).__name__}, not a "
                "__reduce__ tuple (callable, args, ...) or NotImplemented"
            )
            assert callable(rv[0]) and isinstance(rv[1], tuple)

    def test_rebuild_functions_are_found_by_name(
        self, spec: SerializerSpec, values: Sequence[object]
    ) -> None:
        """The checkpoint names the rebuild function, and a resumed process imports it: a
        lambda, a closure or a method of a local class cannot be found there."""
        for value, rv in self._reduced(spec, values):
            rebuild = rv[0]
            if isinstance(rebuild, type):
                continue  # a class, found by name as any class
            module, qualname = rebuild.__module__, rebuild.__qualname__
            found: Any = importlib.import_module(module)
            for part in qualname.split("."):
                found = getattr(found, part, None)
            assert found is rebuild, (
                f"the rebuild function {module}.{qualname} (of {_qualified(type(value))}) "
                "cannot be found by its name: make it a module-level function"
            )

    def test_values_come_back(self, spec: SerializerSpec, values: Sequence[object]) -> None:
        for value in values:
            restored = pickle.loads(self._dumps(spec, value))
            assert type(restored) is type(value)
            assert self.same(value, restored), f"a {_qualified(type(value))} came back changed"

    def test_one_object_comes_back_as_one(
        self, spec: SerializerSpec, values: Sequence[object]
    ) -> None:
        """A value the program holds in two places is one object after a resume."""
        for value in values:
            first, second = pickle.loads(self._dumps(spec, [value, value]))
            assert first is second, f"a {_qualified(type(value))} came back as two objects"

    def test_values_load_in_a_new_interpreter(
        self, spec: SerializerSpec, values: Sequence[object]
    ) -> None:
        """Loaded where nothing but what unpickling imports has run, as in a resumed process
        before the program's own state."""
        for value in values:
            loaded = _loads_elsewhere(self._dumps(spec, value))
            assert loaded == _qualified(type(value)), loaded

    def test_refused_values_say_why(self, spec: SerializerSpec) -> None:
        refused = list(self.make_refused())
        if not refused:
            pytest.skip("make_refused() gives no value this serializer refuses")
        for value in refused:
            reducer = self._reducer_of(spec, value)
            assert reducer is not None
            with pytest.raises((TypeError, WaitForSafePoint)) as said:
                reducer(value)
            assert str(said.value).strip(), "a refusal must name the value and the way out"


class CaptureExtensionContract(_Contract):
    """What a capture extension must do. Implement :meth:`make_spec`, :meth:`change` (change
    the state the extension carries, as a program would), :meth:`reset` (put that state as a new
    process starts with it) and :meth:`observe` (the state as the program sees it, comparable
    with ``==``). Each test plays a resume in this process: the program changes the state, a
    checkpoint captures it, the state is reset as a new process has it, and the restore must
    bring back what was captured. An extension may carry the whole state (an RNG's) or only
    the program's changes to it (a setting): both pass. The state is put back after each
    test."""

    def make_spec(self) -> CaptureExtensionSpec:
        raise NotImplementedError

    def change(self) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def observe(self) -> object:
        raise NotImplementedError

    @pytest.fixture
    def spec(self) -> Iterator[CaptureExtensionSpec]:
        spec = self.make_spec()
        for module in spec.modules:  # the engine runs it only once they are loaded
            importlib.import_module(module)
        kept = spec.capture()
        try:
            yield spec
        finally:
            self.reset()
            spec.restore(kept)

    def _changed_and_captured(self, spec: CaptureExtensionSpec) -> tuple[object, Any]:
        before = self.observe()
        self.change()
        saved = self.observe()
        assert saved != before, (
            "change() changed nothing observe() sees: make it change what the extension carries"
        )
        return saved, spec.capture()

    def _reset(self, saved: object) -> None:
        self.reset()
        assert self.observe() != saved, (
            "after reset() the state is still as change() left it: make reset() put it as a "
            "new process starts with it"
        )

    def test_modules_are_importable(self, spec: CaptureExtensionSpec) -> None:
        for module in spec.modules:
            assert importlib.util.find_spec(module) is not None, f"no module {module!r}"

    def test_capture_changes_nothing(self, spec: CaptureExtensionSpec) -> None:
        """A periodic checkpoint captures while the program runs on: it must not notice."""
        self.change()
        before = self.observe()
        spec.capture()
        assert self.observe() == before

    def test_restore_brings_back_what_capture_saw(self, spec: CaptureExtensionSpec) -> None:
        saved, value = self._changed_and_captured(spec)
        self._reset(saved)
        spec.restore(value)
        assert self.observe() == saved

    def test_the_value_travels_by_pickle(self, spec: CaptureExtensionSpec) -> None:
        saved, value = self._changed_and_captured(spec)
        value = pickle.loads(pickle.dumps(value, protocol=5))
        self._reset(saved)
        spec.restore(value)
        assert self.observe() == saved

    def test_restore_twice_is_restore_once(self, spec: CaptureExtensionSpec) -> None:
        saved, value = self._changed_and_captured(spec)
        self._reset(saved)
        spec.restore(value)
        spec.restore(value)
        assert self.observe() == saved

    def test_the_value_loads_in_a_new_interpreter(self, spec: CaptureExtensionSpec) -> None:
        _, value = self._changed_and_captured(spec)
        loaded = _loads_elsewhere(pickle.dumps(value, protocol=5), spec.modules)
        assert loaded == _qualified(type(value)), loaded
