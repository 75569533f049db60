"""Code of the user's modules that runs while a checkpoint loads finds its module's globals.

Unpickling runs the program's own code: a dict subclass is filled through its ``__setitem__``
(torchbearer's ``State``), an Enum's members are made through its ``__new__`` (ignite's
``EventEnum``), a ``__setstate__`` or a ``__reduce__`` callable runs. The checkpoint loaded every
value first and filled the user namespaces only afterwards, so that code met empty namespaces
and the resume failed with NameError. Now each global is set in its module as soon as it loads,
definitions first, a module after those it needs, and a user class the moment it is made
(:mod:`portal.capture.namespaces`). The script (``corpus/restore_order``) holds each shape, in a
package ``shop`` of the job's directory whose modules import each other and in the script itself;
it pauses itself inside a function at fixed steps and prints what it sees after every step,
including whether each function still shares its module's namespace.
"""

from __future__ import annotations

import enum
import shutil
import types
from pathlib import Path

from _harness import CORPUS, EXIT_PAUSED, plain_run, run_to_end

from portal.capture.namespaces import fill_order

#: The script pauses itself at three steps (see its ``PAUSE_AT``).
PAUSES = 3


def test_user_code_run_while_loading_finds_its_modules_globals(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(CORPUS / "restore_order", job)
    script = job / "main.py"
    plain = plain_run(script)
    assert plain.returncode == 0, plain.stderr.decode()
    assert b"identity ok" in plain.stdout

    codes, out, err = run_to_end(script, tmp_path / "ck.portal", max_runs=2 * PAUSES + 1)
    assert codes == [EXIT_PAUSED] * PAUSES + [0], err.decode()
    assert err == b""
    assert out == plain.stdout  # same states, same enum members, same namespaces


def _function() -> None:
    pass


def test_fill_order_sets_definitions_first_and_a_module_after_those_it_needs() -> None:
    box_class = type("Box", (dict,), {"__module__": "lib"})
    color = enum.Enum("Color", "RED", module="lib")
    f = types.FunctionType(_function.__code__, {"__name__": "app"}, "f")
    app = types.ModuleType("app")
    # Load order: "app" first, though it holds values of "lib"; "__main__" is listed first.
    namespaces: list[tuple[str, dict[str, object]]] = [
        ("__main__", {"app": app, "data": [box_class()], "f": f}),
        ("app", {"state": box_class(), "Box": box_class, "f": f}),
        ("lib", {"cache": {"k": box_class()}, "Color": color, "N": 3}),
    ]
    order = [(module, name) for module, name, _ in fill_order(namespaces)]
    assert order == [
        ("lib", "Color"),
        ("lib", "N"),
        ("app", "Box"),
        ("app", "f"),
        ("__main__", "app"),
        ("__main__", "f"),
        ("lib", "cache"),
        ("app", "state"),
        ("__main__", "data"),
    ]


def test_fill_order_breaks_an_import_cycle_in_load_order() -> None:
    a, b = types.ModuleType("a"), types.ModuleType("b")
    namespaces: list[tuple[str, dict[str, object]]] = [
        ("a", {"b": b, "x": 1}),
        ("b", {"a": a, "y": 2}),
    ]
    order = [(module, name) for module, name, _ in fill_order(namespaces)]
    assert order == [("b", "a"), ("b", "y"), ("a", "b"), ("a", "x")]
