"""Holds object graphs far deeper than a recursive pickle reaches (a doubly linked list, a tree
with parent pointers, a chain through slots and a list subclass) and pauses itself twice while
walking them, the second time in resumed frames (under Portal)."""

import os
import signal

from portal.runtime import rt

LINKS = 20_000


class Node:
    def __init__(self, value, prev):
        self.value = value
        self.prev = prev
        self.next = None


class Slotted:
    __slots__ = ("link", "value")


class Children(list):
    pass


class TreeNode:
    def __init__(self, parent):
        self.parent = parent
        self.children = Children()


def build():
    head = node = Node(0, None)
    for i in range(1, LINKS):
        node.next = Node(i, node)
        node = node.next
    root = tree = TreeNode(None)
    for _ in range(LINKS // 5):
        child = TreeNode(tree)
        tree.children.append(child)
        tree.children.append(TreeNode(tree))
        tree = child
    chain = None
    for i in range(LINKS):
        link = Slotted()
        link.link, link.value = chain, i
        chain = link
    return head, node, root, chain


def walk(head, tail, stops):
    total, node, steps = 0, head, 0
    while node is not None:
        total += node.value
        assert node.next is None or node.next.prev is node
        steps += 1
        if steps in stops and rt.active:
            os.kill(os.getpid(), signal.SIGTERM)
        node = node.next
    assert tail.next is None and tail.value == LINKS - 1
    return total


head, tail, root, chain = build()
print("built")
print("sum", walk(head, tail, {LINKS // 3, 2 * LINKS // 3}))
depth, tree = 0, root
while tree.children:
    assert type(tree.children) is Children and tree.children[0].parent is tree
    tree, depth = tree.children[0], depth + 1
print("tree depth", depth)
count, link = 0, chain
while link is not None:
    count, link = count + link.value, link.link
print("chain", count)
