"""Deep object graphs (portal.capture.deepgraph): chains far longer than a recursive pickle
reaches pickle through the checkpoint's pickler and load back whole, with identity and cycles
kept; a pause of a script holding some resumes; what still cannot go fails clearly."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import pytest
from _harness import EXIT_PAUSED, plain_run, run_to_end

from portal.capture import deepgraph
from portal.capture.pickler import dumps


class Node:
    def __init__(self, value: int, nxt: Node | None) -> None:
        self.value = value
        self.next = nxt


class Slotted:
    __slots__ = ("next", "value")


class Branch:
    def __init__(self, parent: Branch | None) -> None:
        self.parent = parent
        self.children: list[Branch] = []


class Items(list):  # type: ignore[type-arg]
    """A list subclass: its items are deferred with its instance state."""


def _chain(n: int) -> Node:
    head = None
    for i in range(n):
        head = Node(i, head)
    assert head is not None
    return head


def _roundtrip(obj: object) -> Any:
    data, buffers, _ = dumps(obj, namespaces={})
    return pickle.loads(data, buffers=buffers)


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_a_linked_list_of_any_length_comes_back_whole(n: int) -> None:
    head = _chain(n)
    back = _roundtrip({"head": head, "same": head, "tail_ref": [head]})
    assert back["same"] is back["head"] is back["tail_ref"][0]
    node, count = back["head"], 0
    while node is not None:
        assert type(node) is Node and node.value == n - 1 - count
        node, count = node.next, count + 1
    assert count == n


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_a_chain_through_slots_comes_back_whole(n: int) -> None:
    head = None
    for i in range(n):
        link = Slotted()
        link.next, link.value = head, i
        head = link
    back = _roundtrip(head)
    count = 0
    while back is not None:
        assert back.value == n - 1 - count
        back, count = back.next, count + 1
    assert count == n


@pytest.mark.parametrize("depth", [1_000, 10_000, 100_000])
def test_a_tree_with_parent_pointers_keeps_its_cycles(depth: int) -> None:
    root = node = Branch(None)
    for _ in range(depth):
        child = Branch(node)
        node.children += [child, Branch(node)]
        node = child
    back = _roundtrip(root)
    node, seen = back, 0
    while node.children:
        first, second = node.children
        assert first.parent is node and second.parent is node and not second.children
        node, seen = first, seen + 1
    assert seen == depth and back.parent is None


def test_a_ring_through_a_list_subclass_and_a_dict_keyed_by_its_nodes() -> None:
    n = 20_000
    nodes = [Items() for _ in range(n)]
    for i, items in enumerate(nodes):
        items.append(nodes[(i + 1) % n])  # a ring: every list holds the next
    owners = {id(items): i for i, items in enumerate(nodes)}
    keyed = {Node(i, None): i for i in range(3)}  # identity-hashed keys, deferred or not
    back = _roundtrip((nodes[0], keyed))
    first, keys = back
    items, count = first, 0
    while True:
        assert type(items) is Items and len(items) == 1
        items, count = items[0], count + 1
        if items is first:
            break
    assert count == n and len(owners) == n
    assert sorted(k.value for k in keys) == [0, 1, 2] and sorted(keys.values()) == [0, 1, 2]


def test_a_shallow_state_pickles_as_it_always_did() -> None:
    """The plain pickle comes first: a state that fits has no trace of the deferred one."""
    state = {"head": _chain(50)}
    data, _, _ = dumps(state, namespaces={})
    assert data == pickle.dumps(state, protocol=5)


def test_a_chain_that_cannot_be_deferred_fails_clearly_and_keeps_the_limit() -> None:
    nested: list[Any] = []
    for _ in range(100_000):
        nested = [nested]  # plain lists hold each other: nothing to defer
    limit = sys.getrecursionlimit()
    with pytest.raises(pickle.PicklingError, match="excessively deep recursion"):
        dumps(nested, namespaces={})
    assert sys.getrecursionlimit() == limit


def test_a_raised_recursion_limit_does_not_run_off_the_c_stack() -> None:
    """On 3.11 the plain pickle would recurse as deep as the limit lets it (a program that set
    10**6 would crash there); the pickle runs under a limit its stack holds."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1_000_000)
    try:
        back = _roundtrip(_chain(100_000))
        assert sys.getrecursionlimit() == 1_000_000
    finally:
        sys.setrecursionlimit(limit)
    assert back.value == 99_999


def test_too_deep_knows_the_recursion_error_behind_the_pickling_error() -> None:
    try:
        raise pickle.PicklingError("deep") from RecursionError("maximum recursion depth")
    except pickle.PicklingError as exc:
        assert deepgraph.too_deep(exc)
    assert not deepgraph.too_deep(pickle.PicklingError("cannot pickle 'x'"))
    assert not deepgraph.too_deep(TypeError("cannot pickle"))


def test_a_script_holding_deep_graphs_pauses_twice_and_resumes(scripts: Path) -> None:
    script = scripts / "deep_graph.py"
    ckpt = script.with_suffix(".portal")
    codes, out, err = run_to_end(script, ckpt, cwd=scripts, timeout=120)
    assert codes == [EXIT_PAUSED, EXIT_PAUSED, 0], err.decode()
    plain = plain_run(script)
    assert plain.returncode == 0, plain.stderr.decode()
    assert out == plain.stdout
    assert err == plain.stderr == b""
