"""``FILE::FUNCTION`` -> the app function (or ``Class.method``) it names (``bladekit run``).

The file is imported as a module named after it, with its folder first on ``sys.path``, as
``modal run`` does: the containers then import the same module by name (their ``PYTHONPATH`` is
the caller's ``sys.path``), so a function and its module's ``on_preempt`` callback share one
module's globals, exactly as when the module is imported from a program.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from portal.core.errors import InvalidArgumentError

__all__ = ["Target", "find", "load_module"]


@dataclass(frozen=True)
class Target:
    """What ``FILE::NAME`` named: a Function, a Cls and one of its remote methods, or a local
    entrypoint (which runs here)."""

    label: str  # "train.py::Trainer.fit", for messages
    obj: Any  # bladekit.Function | bladekit.Cls | bladekit.LocalEntrypoint
    method: str | None = None


def _error(message: str, **details: Any) -> InvalidArgumentError:
    return InvalidArgumentError(message, details=details)


def load_module(file: str) -> Any:
    """Import ``file`` as a module named after it; every failure is a one-paragraph error."""
    if not file.strip():
        raise _error(
            "FILE::FUNCTION names no file before '::': give the path of a Python file that "
            "defines a bladekit app, e.g. bladekit run train.py::train",
            file=file,
        )
    path = Path(file).expanduser()
    if not path.exists():
        raise _error(
            f"{file}: no such file (looked for {path.absolute()}). Give the path of a Python "
            "file that defines a bladekit app, relative to this folder or absolute, e.g. "
            "bladekit run train.py::train",
            file=file,
        )
    if not path.is_file():
        raise _error(f"{file} is a folder, not a Python file: name the file itself", file=file)
    name = path.stem
    if not name.isidentifier():
        raise _error(
            f"{file}: its name {name!r} cannot be a Python module name, which the containers "
            "need to import it again. Rename the file to letters, digits and underscores "
            "(e.g. train_app.py)",
            file=file,
        )
    if name in sys.stdlib_module_names or (name in sys.modules and name != "__main__"):
        raise _error(
            f"{file}: its module name {name!r} is already taken by {sys.modules.get(name) or 'the standard library'}"
            ", so the containers would import that instead. Rename the file (e.g. "
            f"{name}_app.py)",
            file=file,
        )
    folder = str(path.absolute().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path.absolute())
    if spec is None or spec.loader is None:
        raise _error(f"{file} cannot be imported as Python source: give a .py file", file=file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:
        del sys.modules[name]
        raise _error(
            f"importing {file} called exit({exc.code!r}): code at the top level of the file runs "
            "on import; put it under `if __name__ == '__main__':`",
            file=file,
        ) from None
    except BaseException as exc:
        del sys.modules[name]
        if isinstance(exc, KeyboardInterrupt):
            raise
        where = _where(exc, path)
        raise _error(
            f"importing {file} failed{where}: {type(exc).__name__}: {exc}. Fix the file (run "
            f"`python {file}` to see the full traceback) and try again",
            file=file,
        ) from None
    return module


def _where(exc: BaseException, path: Path) -> str:
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f" at line {exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return f" at line {frames[-1].lineno}" if frames else ""


def _entrypoints(module: Any) -> list[str]:
    from bladekit.app import LocalEntrypoint

    return sorted(key for key, value in vars(module).items() if isinstance(value, LocalEntrypoint))


def _available(module: Any) -> list[str]:
    from bladekit.app import Cls, Function, LocalEntrypoint

    names: list[str] = []
    for key, value in vars(module).items():
        if isinstance(value, Function | LocalEntrypoint):
            names.append(key)
        elif isinstance(value, Cls):
            names.extend(f"{key}.{m}" for m in value.methods)
    return sorted(names)


def find(module: Any, file: str, name: str | None) -> Target:
    """The function ``name`` (``fn``, ``Class.method`` or a local entrypoint) of ``module``;
    ``None``: its local entrypoint, as ``modal run FILE`` starts it, else its only function."""
    from bladekit.app import Cls, Function, LocalEntrypoint

    available = _available(module)
    listed = ", ".join(available) or "none (decorate one with @app.function() or @app.cls())"
    if name is None:
        entrypoints = _entrypoints(module)
        if len(entrypoints) == 1:
            name = entrypoints[0]
        elif entrypoints:
            raise _error(
                f"{file} defines {len(entrypoints)} local entrypoints, and FILE alone runs the "
                f"only one: name it as {file}::NAME (one of: {', '.join(entrypoints)})",
                file=file,
            )
        elif len(available) == 1:
            name = available[0]
        else:
            raise _error(
                f"{file} defines {len(available)} bladekit functions and no local entrypoint, "
                "and FILE alone runs the local entrypoint (@app.local_entrypoint()) or the only "
                f"function: name one as {file}::FUNCTION (one of: {listed})",
                file=file,
            )
    if not name:
        raise _error(f"{file}:: names no function: write {file}::FUNCTION (one of: {listed})")
    head, _, method = name.partition(".")
    found = vars(module).get(head)
    label = f"{file}::{name}"
    if found is None:
        raise _error(
            f"{file} has no {head!r}: the bladekit functions it defines are {listed}. Check the "
            "spelling (FILE::FUNCTION or FILE::Class.method)",
            file=file,
            name=name,
        )
    if isinstance(found, LocalEntrypoint):
        if method:
            raise _error(f"{label}: {head} is a local entrypoint: write {file}::{head}")
        return Target(label=label, obj=found)
    if isinstance(found, Function):
        if method:
            raise _error(f"{label}: {head} is a function, not a class: write {file}::{head}")
        return Target(label=label, obj=found)
    if isinstance(found, Cls):
        if not method:
            raise _error(
                f"{label} is a class: name one of its remote methods, "
                f"{file}::{head}.METHOD (one of: {', '.join(found.methods) or 'none'})",
                file=file,
            )
        if method not in found.methods:
            raise _error(
                f"{label}: class {head} has no remote method {method!r} (methods marked "
                f"@app.method(): {', '.join(found.methods) or 'none'}). Mark it with "
                "@app.method() or check the spelling",
                file=file,
            )
        return Target(label=label, obj=found, method=method)
    kind = "class" if isinstance(found, type) else type(found).__name__
    raise _error(
        f"{label}: {head} is a plain {kind}, not a bladekit function: decorate it with "
        f"@app.function() (or @app.cls() for a class). Runnable here: {listed}",
        file=file,
    )
