"""Instances of the program's own classes with a ``__reduce__`` of their own travel as their raw
state (portal.capture.instances): no code of the program runs at the pause or at the resume; a
class whose raw state cannot travel is still pickled its own way."""

from __future__ import annotations

import pickle
import sys
import threading
import types
from collections.abc import Iterator

import pytest

from portal.capture import instances
from portal.capture.pickler import dumps

SOURCE = '''
import threading

calls = []


class Number:
    __slots__ = ("_value", "__private")

    def __new__(cls, value=0):
        calls.append("__new__")
        self = object.__new__(cls)
        self._value = value
        self.__private = -value
        return self

    def __reduce__(self):
        calls.append("__reduce__")
        return rebuild, (self._value,)


class Constant(Number):
    """Its value is computed each time it is read: a property over the base's slot."""

    def __new__(cls, name):
        return object.__new__(cls)

    def __init__(self, name):
        self.name = name

    @property
    def _value(self):
        calls.append("computed")
        return 314


def rebuild(value):
    calls.append("rebuild")
    return Number(value)


class Guarded:
    """Its raw state holds a held lock; its own __reduce__ makes a fresh one."""

    def __init__(self):
        self.lock = threading.Lock()
        self.lock.acquire()
        self.value = 7

    def __reduce__(self):
        return Guarded, ()


class Plain:
    def __init__(self):
        self.x = 1
'''


@pytest.fixture
def user_module() -> Iterator[types.ModuleType]:
    module = types.ModuleType("portal_exact_user")
    sys.modules[module.__name__] = module
    exec(compile(SOURCE, "<portal_exact_user>", "exec"), module.__dict__)
    try:
        yield module
    finally:
        del sys.modules[module.__name__]


def _roundtrip(obj: object, module: types.ModuleType) -> object:
    data, buffers, _ = dumps(obj, namespaces={id(module.__dict__): module.__name__})
    return pickle.loads(data, buffers=buffers)


def test_own_reduce_and_new_never_run_and_the_raw_state_comes_back(
    user_module: types.ModuleType,
) -> None:
    number = user_module.Number(5)
    constant = user_module.Constant("pi")
    user_module.Number.__dict__["_value"].__set__(constant, 3)  # the slot under the property
    user_module.calls.clear()
    back_number, back_constant, again = _roundtrip(  # type: ignore[misc]
        [number, constant, number], user_module
    )
    assert user_module.calls == []  # no __reduce__, no property, no __new__, no rebuild
    assert back_number is again and type(back_number) is user_module.Number
    assert back_number._value == 5 and back_number._Number__private == -5
    assert type(back_constant) is user_module.Constant and back_constant.name == "pi"
    assert user_module.Number.__dict__["_value"].__get__(back_constant) == 3
    assert back_constant._value == 314  # the property, as before


def test_a_raw_state_that_cannot_travel_falls_back_to_the_class_s_own_way(
    user_module: types.ModuleType,
) -> None:
    guarded = user_module.Guarded()
    back = _roundtrip({"guarded": guarded, "plain": user_module.Plain()}, user_module)
    assert isinstance(back, dict)
    assert type(back["guarded"]) is user_module.Guarded and back["guarded"].value == 7
    assert back["plain"].x == 1


def test_only_the_program_s_own_classes_with_a_reduce_of_their_own_are_candidates(
    user_module: types.ModuleType,
) -> None:
    users = {user_module.__name__}
    assert instances.is_exact_candidate(user_module.Number, users)
    assert instances.is_exact_candidate(user_module.Constant, users)
    assert not instances.is_exact_candidate(user_module.Plain, users)  # pickle's way is raw
    assert not instances.is_exact_candidate(user_module.Number, {"elsewhere"})
    assert not instances.is_exact_candidate(threading.Thread, users)

    class Mine(dict):  # type: ignore[type-arg]  # a builtin base: its own layout
        def __reduce__(self) -> tuple[object, ...]:
            return (dict, ())

    Mine.__module__ = user_module.__name__
    assert not instances.is_exact_candidate(Mine, users)
