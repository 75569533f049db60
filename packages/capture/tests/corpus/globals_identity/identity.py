"""The check both scripts print (user module ``identity``, copied next to them by the test).

After a resume, every function written in the job's directory must still share its module's
namespace: ``func.__globals__ is sys.modules[func.__module__].__dict__``.
"""

import os
import sys
import types


def _functions_of(module_name):
    """(name, function) for every function the module defines: its own, its classes' methods
    (static and class methods, properties), and what decorators wrap (``__wrapped__``)."""
    module = sys.modules[module_name]
    found = []
    for name, value in list(vars(module).items()):
        if isinstance(value, type) and value.__module__ == module_name:
            for attr, member in vars(value).items():
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                elif isinstance(member, property):
                    member = member.fget
                if isinstance(member, types.FunctionType):
                    found.append((name + "." + attr, member))
        elif isinstance(value, types.FunctionType):
            found.append((name, value))
    unwrapped = []
    for name, func in found:
        while hasattr(func, "__wrapped__"):
            name, func = name + ".__wrapped__", func.__wrapped__
            unwrapped.append((name, func))
    return found + unwrapped


def globals_problems(modules, frame_globals):
    """Why a function of the script or its modules does not share its module's namespace.

    A function written in the job's directory must have ``__globals__`` be
    ``sys.modules[its module].__dict__`` (library wrappers, such as ``torch.no_grad()``'s, keep
    their library's globals and are not the script's). ``frame_globals``: the caller's frame's.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    bad = []
    for module_name in modules:
        for name, func in _functions_of(module_name):
            if os.path.dirname(os.path.abspath(func.__code__.co_filename)) != here:
                continue
            if func.__globals__ is not sys.modules[func.__module__].__dict__:
                bad.append(module_name + ":" + name)
    if frame_globals is not sys.modules["__main__"].__dict__:
        bad.append("<frame globals>")
    return bad
