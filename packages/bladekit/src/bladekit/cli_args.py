"""Command-line words -> the arguments of a function, read from its signature (``bladekit run``).

As ``modal run``: each parameter is an option named after it (``--steps 12``; ``--learning-rate``
and ``--learning_rate`` both work), a ``bool`` is a flag (``--resume`` / ``--no-resume``), and
words without ``--`` fill the positional parameters in order. Values are converted by the
parameter's annotation (``str``, ``int``, ``float``, ``bool``, ``pathlib.Path``, ``Literal``,
and ``X | None`` of those); an unannotated parameter gets the string. Anything else is refused
with its name, so a typo never reaches the function as a wrong value.
"""

from __future__ import annotations

import inspect
import pathlib
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

from portal.core.errors import InvalidArgumentError

__all__ = ["describe", "parse"]

_TRUE = {"1", "true", "yes", "y", "on"}
_FALSE = {"0", "false", "no", "n", "off"}


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # an annotation naming something undefined: fall back to the raw text
        return {name: p.annotation for name, p in inspect.signature(fn).parameters.items()}


def _base(annotation: Any) -> Any:
    """``X`` for ``X | None`` / ``Optional[X]``; the annotation itself otherwise."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _type_name(annotation: Any) -> str:
    base = _base(annotation)
    if base is inspect.Parameter.empty:
        return "str"
    if typing.get_origin(base) is typing.Literal:
        return "|".join(str(v) for v in typing.get_args(base))
    return getattr(base, "__name__", str(base))


def _convert(name: str, raw: str, annotation: Any, where: str) -> Any:
    base = _base(annotation)
    if isinstance(base, str):  # a string annotation get_type_hints could not resolve
        base = {"str": str, "int": int, "float": float, "bool": bool}.get(base, base)
    try:
        if base is inspect.Parameter.empty or base is str or base is Any:
            return raw
        if base is bool:
            lowered = raw.strip().lower()
            if lowered in _TRUE | _FALSE:
                return lowered in _TRUE
            raise ValueError("not a yes/no value")
        if base is int or base is float:
            return base(raw)
        if base is pathlib.Path or base is pathlib.PurePath:
            return pathlib.Path(raw)
        if typing.get_origin(base) is typing.Literal:
            for choice in typing.get_args(base):
                if str(choice) == raw:
                    return choice
            raise ValueError(f"not one of {', '.join(map(str, typing.get_args(base)))}")
    except ValueError as exc:
        raise InvalidArgumentError(
            f"{where}: --{name} {raw!r} is not a valid {_type_name(annotation)} ({exc}). "
            f"Give a value of type {_type_name(annotation)}",
            details={"parameter": name, "value": raw},
        ) from None
    raise InvalidArgumentError(
        f"{where}: parameter {name} is annotated {_type_name(annotation)}, which `bladekit run` "
        "cannot build from the command line (it reads str, int, float, bool, Path and Literal). "
        "Take a str and convert it in the function, or call it from Python",
        details={"parameter": name},
    )


def _parameters(fn: Callable[..., Any], *, skip_self: bool) -> list[inspect.Parameter]:
    params = list(inspect.signature(fn).parameters.values())
    return params[1:] if skip_self and params else params


def describe(fn: Callable[..., Any], *, skip_self: bool = False) -> str:
    """One line per parameter (its option, type and default), for ``--help``."""
    hints = _hints(fn)
    lines = []
    for p in _parameters(fn, skip_self=skip_self):
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            lines.append(f"  [{p.name}...]          extra words (any number)")
            continue
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            lines.append("  [--NAME VALUE...]     extra options, passed as strings")
            continue
        annotation = hints.get(p.name, p.annotation)
        kind = _type_name(annotation)
        option = f"--{p.name.replace('_', '-')}"
        if _base(annotation) is bool:
            option += f" / --no-{p.name.replace('_', '-')}"
        default = "required" if p.default is p.empty else f"default {p.default!r}"
        lines.append(
            f"  {option} {kind.upper() if kind != 'bool' else ''}".rstrip() + f"  ({default})"
        )
    return "\n".join(lines) or "  (no parameters)"


def _next_value(words: Sequence[str], i: int, key: str, where: str) -> tuple[str, int]:
    """The word after ``--key`` (its value) and the index after it; none left is an error."""
    if i >= len(words):
        raise InvalidArgumentError(
            f"{where}: option --{key} needs a value (--{key} VALUE)",
            details={"option": key},
        )
    return words[i], i + 1


def parse(
    fn: Callable[..., Any], words: Sequence[str], *, where: str, skip_self: bool = False
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` for calling ``fn`` with the command-line ``words``.

    ``where`` names the function in errors (``train.py::train``).
    """
    hints = _hints(fn)
    params = _parameters(fn, skip_self=skip_self)
    by_option = {}
    for p in params:
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY):
            by_option[p.name] = p
            by_option[p.name.replace("_", "-")] = p
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_positional = next((p for p in params if p.kind is p.VAR_POSITIONAL), None)
    var_keyword = next((p for p in params if p.kind is p.VAR_KEYWORD), None)
    values: dict[str, Any] = {}
    extra_args: list[Any] = []
    extra_kwargs: dict[str, str] = {}
    loose: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            loose.extend(words[i:])
            break
        if not word.startswith("--") or word == "--":
            loose.append(word)
            continue
        key, has_value, value = word[2:].partition("=")
        param = by_option.get(key)
        negated = False
        if param is None and key.startswith("no-") and key[3:] in by_option:
            param, negated = by_option[key[3:]], True
        if param is None:
            if var_keyword is not None:
                if not has_value:
                    value, i = _next_value(words, i, key, where)
                extra_kwargs[key.replace("-", "_")] = value
                continue
            known = sorted({f"--{p.name.replace('_', '-')}" for p in by_option.values()})
            raise InvalidArgumentError(
                f"{where} has no parameter --{key}: its options are "
                f"{', '.join(known) or 'none'} (see --help)",
                details={"option": key},
            )
        annotation = hints.get(param.name, param.annotation)
        if param.name in values:
            raise InvalidArgumentError(
                f"{where}: --{key} is given twice: give each parameter once",
                details={"parameter": param.name},
            )
        if _base(annotation) is bool and not has_value:
            values[param.name] = not negated
            continue
        if negated:
            raise InvalidArgumentError(
                f"{where}: --no-{key[3:] if key.startswith('no-') else key} is only for yes/no "
                f"parameters; {param.name} is a {_type_name(annotation)}",
                details={"parameter": param.name},
            )
        if not has_value:
            value, i = _next_value(words, i, key, where)
        values[param.name] = _convert(param.name, value, annotation, where)
    # Words fill the positional parameters in order, as in Python: one also named by an option
    # is given twice (f(1, a=100) is a TypeError), never silently the next one.
    free = list(positional)
    for word in loose:
        if free:
            param = free.pop(0)
            if param.name in values:
                order = ", ".join(p.name for p in positional)
                raise InvalidArgumentError(
                    f"{where}: {param.name} is given twice: the word {word!r} fills it (words "
                    f"fill {order} in order) and --{param.name.replace('_', '-')} names it too. "
                    "Give each parameter once, as a word or by name",
                    details={"parameter": param.name},
                )
            values[param.name] = _convert(
                param.name, word, hints.get(param.name, param.annotation), where
            )
        elif var_positional is not None:
            annotation = hints.get(var_positional.name, var_positional.annotation)
            extra_args.append(_convert(var_positional.name, word, annotation, where))
        else:
            raise InvalidArgumentError(
                f"{where} takes {len(positional)} positional argument(s), but {word!r} is one "
                "more: pass options as --name value (see --help)",
                details={"word": word},
            )
    missing = [
        p.name
        for p in params
        if p.name not in values
        and p.default is p.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if missing:
        options = " ".join(f"--{name.replace('_', '-')} VALUE" for name in missing)
        raise InvalidArgumentError(
            f"{where} needs {', '.join(missing)}: give {options} (or as words in order)",
            details={"missing": missing},
        )
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in params:
        if p.kind is p.POSITIONAL_ONLY and p.name in values:
            args.append(values[p.name])
        elif p.name in values:
            kwargs[p.name] = values[p.name]
    if extra_args:  # *args needs every positional parameter passed positionally before it
        args = [values[p.name] for p in positional if p.name in values] + extra_args
        kwargs = {k: v for k, v in kwargs.items() if k not in {p.name for p in positional}}
    kwargs.update(extra_kwargs)
    return tuple(args), kwargs
