"""Lifecycle hooks: ``@on_preempt``, ``@enter()`` and ``@method()``, and finding them again.

The decorators only *mark* functions (attributes on the function object) and return them
unchanged, so a marked method is still an ordinary method and survives cloudpickle into the
container, where the runner finds the marks again. ``__fabric_on_preempt__`` is the attribute the
spec names; the other two are bladekit's own.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from portal.core.errors import InvalidArgumentError

__all__ = [
    "ENTER_ATTR",
    "METHOD_ATTR",
    "ON_PREEMPT_ATTR",
    "enter",
    "find_class_hooks",
    "find_module_on_preempt",
    "is_method_definition",
    "method",
    "on_preempt",
    "refuse_unless_plain",
]

F = TypeVar("F", bound=Callable[..., Any])

ON_PREEMPT_ATTR = "__fabric_on_preempt__"
ENTER_ATTR = "__bladekit_enter__"
METHOD_ATTR = "__bladekit_method__"


def is_method_definition(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` is being defined in a class body (its qualname is ``Class.name``)."""
    parts = getattr(fn, "__qualname__", "").split(".")
    return len(parts) >= 2 and parts[-2] != "<locals>"


def _callable_name(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def on_preempt(fn: F | None = None) -> F:
    """Register ``fn`` as the callback run inside the grace window when the container is preempted.

    Used bare (``@bladekit.on_preempt``), on a free function or on an ``@app.cls`` method (then
    ``self`` is the live instance). One callback per app or class: a second free callback in the
    same module, or a second method in the same class, is refused.
    """
    if fn is None or isinstance(fn, type) or not callable(fn):
        raise InvalidArgumentError(
            f"@bladekit.on_preempt was given {fn!r}, which is not a function: use it bare, "
            "without parentheses, directly above a def (@bladekit.on_preempt, not "
            "@bladekit.on_preempt())",
            details={"given": repr(fn)},
        )
    _check_arity(fn)
    if not is_method_definition(fn):
        globals_ = getattr(fn, "__globals__", None)
        if isinstance(globals_, Mapping):
            other = find_module_on_preempt(globals_)
            if other is not None and other.__name__ != fn.__name__:
                raise InvalidArgumentError(
                    f"module {fn.__module__} already has an on_preempt callback "
                    f"({_callable_name(other)}); {_callable_name(fn)} would be a second one. An "
                    "app runs a single callback: call both from one function instead",
                    details={"existing": _callable_name(other), "new": _callable_name(fn)},
                )
    setattr(fn, ON_PREEMPT_ATTR, True)
    return fn


def _check_arity(fn: Callable[..., Any]) -> None:
    """The callback is called with no arguments (plus ``self``): say so at decoration time."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return
    required = [
        p
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    allowed = 1 if is_method_definition(fn) else 0
    if len(required) > allowed:
        what = "self only" if allowed else "no arguments"
        raise InvalidArgumentError(
            f"on_preempt callback {_callable_name(fn)} requires {len(required)} positional "
            f"argument(s), but it is called with {what}: give the others defaults, or read them "
            "from the instance or module state",
            details={"callback": _callable_name(fn)},
        )


def refuse_unless_plain(fn: Callable[..., Any], decorator: str) -> None:
    """Refuse an ``async def`` or generator function: a container calls a plain function and
    sends back the one value it returns, so these would fail only when called."""
    name = getattr(fn, "__name__", "fn")
    if inspect.isasyncgenfunction(fn):
        kind = "an async generator"
        how = (
            f"collects its items: def {name}_all(...): return asyncio.run(collect({name}(...))), "
            "with async def collect(items): return [x async for x in items]"
        )
    elif inspect.iscoroutinefunction(fn):
        kind = "an async def function"
        how = f"runs it: def {name}_sync(...): return asyncio.run({name}(...))"
    elif inspect.isgeneratorfunction(fn):
        kind = "a generator function (it yields)"
        how = f"returns a list: def {name}_all(...): return list({name}(...))"
    else:
        return
    raise InvalidArgumentError(
        f"{decorator} was given {_callable_name(fn)}, {kind}: bladekit runs plain functions, "
        "whose container sends back the one value they return. Decorate a plain function that "
        f"{how}",
        details={"given": _callable_name(fn), "decorator": decorator},
    )


def _marker(attr: str, decorator: str) -> Callable[[F], F]:
    def mark(fn: F) -> F:
        if isinstance(fn, type) or not callable(fn):
            raise InvalidArgumentError(
                f"{decorator} was given {fn!r}, which is not a function: put it directly above "
                "a def inside an @app.cls class",
                details={"given": repr(fn)},
            )
        refuse_unless_plain(fn, decorator)
        setattr(fn, attr, True)
        return fn

    return mark


@overload
def enter(fn: F, /) -> F: ...
@overload
def enter() -> Callable[[F], F]: ...
def enter(fn: F | None = None, /) -> F | Callable[[F], F]:
    """Mark a method of an ``@app.cls`` class to run when each container attempt starts.

    Runs again on every new attempt after a preemption, which is where a checkpoint is loaded.
    Written ``@bladekit.enter()`` as in the spec; the bare form is accepted too.
    """
    mark: Callable[[F], F] = _marker(ENTER_ATTR, "@bladekit.enter()")
    return mark if fn is None else mark(fn)


@overload
def method(fn: F, /) -> F: ...
@overload
def method() -> Callable[[F], F]: ...
def method(fn: F | None = None, /) -> F | Callable[[F], F]:
    """Mark a method of an ``@app.cls`` class as callable remotely (``obj.name.remote(...)``)."""
    mark: Callable[[F], F] = _marker(METHOD_ATTR, "@app.method()")
    return mark if fn is None else mark(fn)


def find_module_on_preempt(namespace: Mapping[str, Any]) -> Callable[..., Any] | None:
    """The free on_preempt callback defined in a module's namespace, if any."""
    for value in list(namespace.values()):
        if (
            callable(value)
            and getattr(value, ON_PREEMPT_ATTR, False) is True
            and not isinstance(value, type)
            and not is_method_definition(value)
        ):
            return value  # type: ignore[no-any-return]
    return None


def find_class_hooks(cls: type) -> tuple[list[str], str | None, list[str]]:
    """``(enter method names, on_preempt method name, remote method names)`` of ``cls``.

    Walks the MRO so a hook inherited from a base class counts; refuses two on_preempt methods.
    """
    enters: list[str] = []
    methods: list[str] = []
    preempt: list[str] = []
    seen: set[str] = set()
    for klass in cls.__mro__:
        if klass is object:
            continue
        for name, value in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            fn = value.__func__ if isinstance(value, staticmethod | classmethod) else value
            if getattr(fn, ENTER_ATTR, False):
                enters.append(name)
            if getattr(fn, METHOD_ATTR, False):
                methods.append(name)
            if getattr(fn, ON_PREEMPT_ATTR, False):
                preempt.append(name)
    if len(preempt) > 1:
        names = ", ".join(f"{cls.__qualname__}.{n}" for n in sorted(preempt))
        raise InvalidArgumentError(
            f"class {cls.__qualname__} has {len(preempt)} on_preempt callbacks ({names}); a class "
            "runs a single callback: keep one and call the others from it",
            details={"class": cls.__qualname__, "callbacks": sorted(preempt)},
        )
    return enters, (preempt[0] if preempt else None), methods
