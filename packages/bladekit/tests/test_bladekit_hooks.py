"""The decorators: marks, single callback per app or class, clear errors."""

from __future__ import annotations

import types

import pytest

import bladekit
from bladekit.hooks import ON_PREEMPT_ATTR, find_module_on_preempt


def test_on_preempt_is_bare_and_marks_the_function() -> None:
    def checkpoint_fn() -> None: ...

    assert bladekit.on_preempt(checkpoint_fn) is checkpoint_fn
    assert getattr(checkpoint_fn, ON_PREEMPT_ATTR) is True


def test_with_parentheses_says_how_to_use_it() -> None:
    with pytest.raises(bladekit.InvalidArgumentError, match="without parentheses"):
        bladekit.on_preempt()  # type: ignore[call-arg]


def test_method_form_and_app_reexport() -> None:
    app = bladekit.app("h")

    @app.cls()
    class Trainer:
        @app.on_preempt
        def checkpoint(self) -> None: ...

        @bladekit.enter()
        def load(self) -> None: ...

        @app.method()
        def step(self) -> None: ...

    assert (Trainer.enter, Trainer.on_preempt, Trainer.methods) == (
        ["load"],
        "checkpoint",
        ["step"],
    )


def test_a_second_callback_in_a_class_is_refused() -> None:
    app = bladekit.app("h")
    with pytest.raises(bladekit.InvalidArgumentError, match="2 on_preempt callbacks"):

        @app.cls()
        class Twice:
            @bladekit.on_preempt
            def a(self) -> None: ...

            @bladekit.on_preempt
            def b(self) -> None: ...


def test_a_second_free_callback_in_a_module_is_refused() -> None:
    module = types.ModuleType("user_module")
    exec(
        "import bladekit\n@bladekit.on_preempt\ndef first(): pass\n",
        module.__dict__,
    )
    assert find_module_on_preempt(module.__dict__) is module.first
    with pytest.raises(bladekit.InvalidArgumentError, match="already has an on_preempt"):
        exec("@bladekit.on_preempt\ndef second(): pass\n", module.__dict__)


def test_a_second_callback_on_one_app_is_refused() -> None:
    app = bladekit.app("h")

    def one() -> None: ...

    def two() -> None: ...

    one.__qualname__, two.__qualname__ = "one", "two"
    app.on_preempt(one)
    with pytest.raises(bladekit.InvalidArgumentError, match="single callback"):
        app.on_preempt(two)


def test_callback_needing_arguments_is_refused() -> None:
    def needs(x: int) -> None: ...

    needs.__qualname__ = "needs"
    with pytest.raises(bladekit.InvalidArgumentError, match="no arguments"):
        bladekit.on_preempt(needs)


def test_remote_method_must_be_marked() -> None:
    app = bladekit.app("h")

    @app.cls()
    class C:
        def plain(self) -> None: ...

    with pytest.raises(AttributeError, match=r"@app.method\(\)"):
        C().plain  # noqa: B018


def test_app_name_validated() -> None:
    with pytest.raises(bladekit.InvalidArgumentError, match="app name"):
        bladekit.app("")
