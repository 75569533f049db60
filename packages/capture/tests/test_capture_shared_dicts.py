"""Objects whose ``__dict__`` is a dict their class holds (a "Borg": accelerate's
``PartialState``, ``AcceleratorState`` and ``GradientState``) come back sharing the new process's
class dict, which gets the carried contents: every ``is`` relation between the carried objects'
``__dict__``s, and between each and its class's dict, is the same after a round trip as before.

Stock pickle gives each instance a copy (``obj.__dict__.update(state)``): after a resume the
accelerator's and the loader's gradient states are two, and an optimizer steps at every batch
while the accelerator accumulates. The class dicts are replaced by empty ones before each load,
as a new process that imported the library again has them.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.capture.pickler import dumps


class SharedA:
    _shared_state: dict[str, Any] = {}  # noqa: RUF012 (the pattern under test)

    def __init__(self) -> None:
        self.__dict__ = self._shared_state


class SharedB(SharedA):
    """A subclass that shares its base's dict (accelerate's states share one per class)."""


class SharedC:
    _state: dict[str, Any] = {}  # noqa: RUF012

    def __init__(self) -> None:
        self.__dict__ = self._state


class Plain:
    pass


KINDS = (SharedA, SharedB, SharedC, Plain)
CLASS_DICTS = ((SharedA, "_shared_state"), (SharedC, "_state"))


@pytest.fixture(autouse=True)
def _fresh_class_dicts() -> Iterator[None]:
    saved = [getattr(cls, name) for cls, name in CLASS_DICTS]
    yield
    for (cls, name), value in zip(CLASS_DICTS, saved, strict=True):
        setattr(cls, name, value)


def _new_process() -> None:
    """The class dicts as a process that imported the library afresh has them."""
    for cls, name in CLASS_DICTS:
        setattr(cls, name, {})


def _relations(objs: list[Any]) -> tuple[list[list[bool]], list[list[bool]]]:
    pairs = [[a.__dict__ is b.__dict__ for b in objs] for a in objs]
    to_class = [[a.__dict__ is getattr(cls, name) for cls, name in CLASS_DICTS] for a in objs]
    return pairs, to_class


def _contents(objs: list[Any]) -> list[dict[str, Any]]:
    """Each object's attributes, a reference to another carried object named by its index."""
    index = {id(o): i for i, o in enumerate(objs)}
    return [
        {k: ("obj", index[id(v)]) if id(v) in index else v for k, v in sorted(vars(o).items())}
        for o in objs
    ]


graphs = st.lists(
    st.tuples(
        st.sampled_from(range(len(KINDS))),
        st.lists(
            st.tuples(
                st.sampled_from(["a", "b", "step", "sync"]),
                st.one_of(
                    st.integers(), st.booleans(), st.tuples(st.just("ref"), st.integers(0, 7))
                ),
            ),
            max_size=4,
        ),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(graphs)
def test_a_round_trip_keeps_every_identity_between_the_dicts(graph: list[Any]) -> None:
    _new_process()
    objs = [KINDS[kind]() for kind, _ in graph]
    for obj, (_, attrs) in zip(objs, graph, strict=True):
        for name, value in attrs:
            if isinstance(value, tuple):
                value = objs[value[1] % len(objs)]
            setattr(obj, name, value)
    before = _relations(objs), _contents(objs)
    data, buffers, _ = dumps(objs, namespaces={})
    _new_process()
    copies = pickle.loads(data, buffers=buffers)
    assert (_relations(copies), _contents(copies)) == before


def test_a_new_instance_after_the_resume_sees_the_carried_state() -> None:
    """What accelerate does at every ``GradientState()``: a new instance reads the class dict."""
    _new_process()
    first = SharedA()
    first.step = 7
    data, buffers, _ = dumps([first, SharedB()], namespaces={})
    _new_process()
    copies = pickle.loads(data, buffers=buffers)
    assert SharedA().step == 7
    assert SharedA().__dict__ is copies[0].__dict__ is copies[1].__dict__
