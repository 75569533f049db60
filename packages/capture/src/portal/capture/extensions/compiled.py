"""``torch.compile``: a compiled module or function travels as the call that made it, and is
compiled again in the resumed process (:mod:`portal.capture.remade`).

What compilation made is the process's own: dynamo's guards and caches, the generated graphs
(inductor's kernels, aot_eager's traced ones), ``FakeTensor``s, a thread-local context; and dynamo
puts its compiled code and what that code refers to into the program's own globals
(``__compiled_fn_…``, ``__import_…``, ``__builtins_dict__…``). Every safe point was refused
for them, and the reasons named dynamo's internal closures rather than the program's
``torch.compile(model)`` line. None of it is needed to continue: compilation is a cache. So:

* ``torch.compile`` is wrapped when torch is imported, and each compiled object it returns is
  registered with its arguments: a module (``OptimizedModule``) is made again at the resume by
  ``torch.compile(the carried module, same arguments)`` and keeps its identity (a stand-in the
  compiled module's attributes go into, :mod:`portal.capture.remade`); a compiled function
  (``@torch.compile``, ``nn.Module.compile()``'s ``_compiled_call_impl``, which torch's own
  pickling leaves out: :func:`reduce_module` keeps it) is compiled again while
  the checkpoint loads (``torch.compile`` only wraps; it compiles at the first call). The
  original module and function travel as any value of the program; the optimizer and the
  program still share the module's parameters.
* the globals dynamo installed do not travel (those each compiled code object's cleanup hooks
  name, in ``torch._dynamo.utils.CleanupManager``, and those of dynamo's names that no hook
  names: :data:`_DYNAMO_GLOBALS`): dynamo installs them again when it compiles again, at the
  first call after the resume.

The resumed run compiles anew (the first steps after a resume take the compile time again), with
the same backend and options, so its outputs are those of the uninterrupted compiled run. What
dynamo counts per process starts afresh too: a function that recompiled up to
``recompile_limit`` and fell back to running uncompiled (an integer attribute changed at every
call, say) is compiled again after a resume, and under inductor its results may then differ in
the last bits from the uninterrupted run's fallback.

The checkpoint names ``torch.compile`` (by reference) and the arguments the program gave it.
"""

from __future__ import annotations

import contextlib
import functools
import re
import types
from collections.abc import Iterator
from typing import Any

from portal.capture import remade
from portal.capture.extensions._imports import when_imported
from portal.core.specs import CaptureExtensionSpec, SerializerSpec

__all__ = ["install", "reduce_module", "serializer_specs", "specs"]

_PATCHED = "_portal_compile_wrapper"


def install(torch: types.ModuleType) -> None:
    """Wrap ``torch.compile`` (once), so each compiled object is registered with its arguments."""
    compile_ = torch.compile
    if getattr(compile_, _PATCHED, False):
        return

    @functools.wraps(compile_)
    def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:
        compiled = compile_(model, *args, **kwargs)
        if model is None or compiled is model:  # a decorator still to apply; disable=True
            return compiled
        # An object the registry cannot hold is refused at the pause, as before.
        with contextlib.suppress(TypeError):
            _register(torch, compiled, model, args, kwargs)
        return compiled

    setattr(compile, _PATCHED, True)
    torch.compile = compile  # type: ignore[attr-defined]
    when_imported("torch._dynamo.utils", _watch_dynamo_globals)


def _register(
    torch: types.ModuleType,
    compiled: Any,
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    # ``torch.compile`` by reference: the wrapper, which registers the new object in turn.
    if isinstance(compiled, torch.nn.Module):
        remade.register(compiled, torch.compile, (model, *args), kwargs)
    else:
        remade.register(compiled, torch.compile, (model, *args), kwargs, at_load=True)


#: Globals dynamo writes into a compiled function's module: its compiled code and resume
#: functions, module aliases for its guards, the builtins dict, values by id
#: (``{prefix}_{id}_c{compile id}``). Some stay after a compile that restarted, with no cleanup
#: hook naming them; dynamo's counters start again in a new process, so a carried one would be
#: "already in scope" at the first compile after the resume.
_DYNAMO_GLOBALS = re.compile(
    r"__compiled_fn_|__resume_at_|__import_|__builtins_dict__|__gen_rand_values|"
    r"__warnings_warn_wrapper|\w*_\d{6,}_c\d+$"
)


def _watch_dynamo_globals(utils: types.ModuleType) -> None:
    manager = getattr(getattr(utils, "CleanupManager", None), "instance", None)
    hook_type = getattr(utils, "CleanupHook", None)

    def installed(namespace: dict[str, Any]) -> Iterator[str]:
        for name in namespace:
            if _DYNAMO_GLOBALS.match(name):
                yield name
        if manager is not None and hook_type is not None:
            for hooks in list(getattr(manager, "values", {}).values()):
                for hook in hooks:
                    if isinstance(hook, hook_type) and hook.scope is namespace:
                        yield hook.name

    remade.remade_globals(installed)


def reduce_module(module: Any) -> Any:
    """A module compiled in place (``nn.Module.compile()``) keeps its compiled call: torch's own
    ``__getstate__`` leaves ``_compiled_call_impl`` out, and the resumed module ran uncompiled.
    Any other module pickles as torch pickles it."""
    impl = module.__dict__.get("_compiled_call_impl")
    if impl is None:
        return NotImplemented
    rv = module.__reduce_ex__(5)
    if len(rv) < 3 or not isinstance(rv[2], dict):
        return NotImplemented
    return (rv[0], rv[1], {**rv[2], "_compiled_call_impl": impl}, *rv[3:])


def serializer_specs() -> list[SerializerSpec]:
    return [
        SerializerSpec(
            name="capture_compiled",
            reducers={"torch.nn.modules.module.Module": reduce_module},
            description="modules compiled in place keep their compiled call (torch.compile's "
            "modules and functions travel as the call that made them)",
        )
    ]


def specs() -> list[CaptureExtensionSpec]:
    """No state of its own: arms the ``torch.compile`` wrapper from torch's import on."""
    when_imported("torch", install)
    return []
