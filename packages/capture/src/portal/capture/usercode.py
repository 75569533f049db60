"""Which code is the user's own: the script and the modules under its directory.

Only the user's code has safe points, and only user modules travel by value; everything else is
an installed library, which the new machine installs and imports again. A virtual environment or
Portal's own sources that happen to sit under the script's directory still count as libraries.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import types
from types import CodeType

__all__ = ["UserCode"]

_LIBRARY_DIRS = ("site-packages", "dist-packages")


def _portal_root() -> str:
    here = os.path.dirname(os.path.abspath(__file__))  # .../portal/capture
    return os.path.realpath(os.path.dirname(here)) + os.sep  # .../portal/


class UserCode:
    """Classifies code objects and modules as the user's own (cached by file name)."""

    def __init__(self, script: str) -> None:
        self.script = os.path.abspath(script)
        self.root = os.path.realpath(os.path.dirname(self.script)) + os.sep
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        prefixes.update(p for p in sysconfig.get_paths().values() if p)
        self._excluded = tuple(
            sorted({os.path.realpath(p) + os.sep for p in prefixes} | {_portal_root()})
        )
        self._files: dict[str, bool] = {}

    def is_user_file(self, filename: str | None) -> bool:
        if not filename:
            return False
        known = self._files.get(filename)
        if known is not None:
            return known
        result = False
        if not filename.startswith("<"):
            real = os.path.realpath(filename)
            result = (
                real.startswith(self.root)
                and not any(
                    real.startswith(p) for p in self._excluded if not self.root.startswith(p)
                )
                and not any(part in _LIBRARY_DIRS for part in real[len(self.root) :].split(os.sep))
            )
        self._files[filename] = result
        return result

    def is_user_code(self, code: CodeType) -> bool:
        return self.is_user_file(code.co_filename)

    def user_modules(self) -> list[tuple[str, types.ModuleType]]:
        """Loaded user modules (not ``__main__``), in load order, each module object once.

        ``sys.modules`` may hold one module under a second name: ``import multiprocessing``
        (torch does it) sets ``sys.modules["__mp_main__"] = sys.modules["__main__"]``, and a
        program may alias a module of its own the same way. Such an alias is not another
        module. Listed as one, its namespace would travel as a separate copy: every function
        of the module would come back bound to that copy's ``__dict__`` (the checkpoint names
        a namespace by the *last* name that has it), while the module (and a resumed frame of
        its) runs in the real one, so a global one side assigns the other never sees. So an
        alias of ``__main__`` is left out, and a module under several names is listed under
        its own ``__name__`` (or, failing that, under the first).
        """
        main = sys.modules.get("__main__")
        chosen: dict[int, tuple[str, types.ModuleType]] = {}
        for name, module in list(sys.modules.items()):
            if name == "__main__" or not isinstance(module, types.ModuleType):
                continue
            if module is main:
                continue
            file = getattr(module, "__file__", None)
            # Imported modules carry absolute paths; a relative ``__file__`` is a library's
            # synthetic module (``torch.ops`` says "_ops.py"), which must not be mistaken for a
            # file of the script's directory when the job runs from there.
            if (
                isinstance(file, str)
                and os.path.isabs(file)
                and self.is_user_file(file)
                and (id(module) not in chosen or name == module.__name__)
            ):
                chosen[id(module)] = (name, module)
        return list(chosen.values())
