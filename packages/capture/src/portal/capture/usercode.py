"""Which code is the user's own (the script and the modules under its directory), and which
code's frames a pause may carry.

Only user modules travel by value; everything else is an installed library, which the new
machine installs and imports again. A virtual environment or Portal's own sources that happen to
sit under the script's directory still count as libraries.

Safe points are wider than the user's code: most training runs inside a framework's loop
(``trainer.train()``), so a pause may come between two statements of any pure-Python frame with
a source file, the script's or an installed library's (:mod:`portal.capture.libraries` records
which library code a checkpoint carries and refuses a resume where it differs). Never carried:
Portal's own code (the engine, the runtime), and code with no file of its own (``exec`` of a
string, the frozen import machinery), which no new machine can be shown to have; and the
standard library's modules that hold the process's own resources while they run
(:data:`OS_BOUND_STDLIB`: ``subprocess``, ``socket``, ``threading``, ``tempfile``...).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import types
from types import CodeType

__all__ = ["OS_BOUND_STDLIB", "UserCode"]

_LIBRARY_DIRS = ("site-packages", "dist-packages")
#: Standard-library modules whose functions hold the process's own resources in their locals
#: while they run (file descriptors as numbers, child processes, sockets, threads, locks, an
#: import in progress): a frame of theirs is never carried, the pause waits until it returns
#: (they return soon, or hand the program what it then holds itself, which is checked as any
#: value is).
OS_BOUND_STDLIB = frozenset(
    {
        "asyncio",
        "concurrent",
        "ftplib",
        "http",
        "imaplib",
        "importlib",
        "logging",
        "mailbox",
        "mmap",
        "multiprocessing",
        "os",
        "pty",
        "queue",
        "selectors",
        "shutil",
        "signal",
        "smtplib",
        "socket",
        "socketserver",
        "sqlite3",
        "ssl",
        "subprocess",
        "tempfile",
        "threading",
        "urllib",
        "xmlrpc",
        "zipfile",
        "tarfile",
        "gzip",
        "bz2",
        "lzma",
    }
)


def _portal_root() -> str:
    here = os.path.dirname(os.path.abspath(__file__))  # .../portal/capture
    return os.path.realpath(os.path.dirname(here)) + os.sep  # .../portal/


_PORTAL_ROOT = _portal_root()
#: Portal's modules whose frames run inside the program's own calls: the import hook (a watched
#: library's whole import runs under its loader), the hooks it runs once that library is
#: imported, and the wrappers Portal puts into a library (a DataLoader iterator's methods,
#: ``torch.compile``). A line a library runs under them is the program's, not Portal at work
#: between two of its bytecodes: the pause waits for them to return as for any frame that
#: cannot travel, and listens only outside them meanwhile. None of them is ever an entry point
#: of Portal's own (a signal handler, the line callback: the engine and the runtime), whose
#: frames below such a line still make it Portal's.
_FOR_THE_PROGRAM = frozenset(
    _PORTAL_ROOT + os.path.join("capture", "extensions", name)
    for name in ("_imports.py", "loops.py", "compiled.py", "torch_state.py")
)


class UserCode:
    """Classifies code objects and modules as the user's own (cached by file name)."""

    def __init__(self, script: str) -> None:
        self.script = os.path.abspath(script)
        self.root = os.path.realpath(os.path.dirname(self.script)) + os.sep
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        prefixes.update(p for p in sysconfig.get_paths().values() if p)
        self._excluded = tuple(
            sorted({os.path.realpath(p) + os.sep for p in prefixes} | {_PORTAL_ROOT})
        )
        self._stdlib = tuple(
            sorted(
                {
                    os.path.realpath(p) + os.sep
                    for key in ("stdlib", "platstdlib")
                    if (p := sysconfig.get_paths().get(key))
                }
            )
        )
        self._files: dict[str, bool] = {}
        self._carried: dict[str, bool] = {}
        self._portal: dict[str, str | None] = {}

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

    def is_carried_file(self, filename: str | None) -> bool:
        """Whether frames of code from ``filename`` may be carried: the user's files, and any
        other real source file but Portal's own (see the module docstring)."""
        if not filename:
            return False
        known = self._carried.get(filename)
        if known is not None:
            return known
        result = self.is_user_file(filename)
        if not result and not filename.startswith("<") and os.path.isabs(filename):
            real = os.path.realpath(filename)
            result = not real.startswith(_PORTAL_ROOT) and self._os_bound(real) is None
        self._carried[filename] = result
        return result

    def os_bound_module(self, filename: str) -> str | None:
        """The standard-library module of :data:`OS_BOUND_STDLIB` that ``filename`` belongs
        to (``subprocess``, ``concurrent``...), or None."""
        return self._os_bound(os.path.realpath(filename))

    def _os_bound(self, real: str) -> str | None:
        for root in self._stdlib:
            if real.startswith(root):
                rest = real[len(root) :].split(os.sep)
                if rest[0] in _LIBRARY_DIRS:
                    return None
                top = rest[0].removesuffix(".py")
                return top if top in OS_BOUND_STDLIB else None
        return None

    def is_portal_file(self, filename: str) -> bool:
        """Portal's own code (the engine, the runtime): its frames are Portal at work between
        two of the program's bytecodes (a signal handler, the line callback), never the
        program's. Not the modules of :data:`_FOR_THE_PROGRAM`, which run inside the program's
        own calls (a watched library's import)."""
        return self._portal_role(filename) == "at work"

    def is_portal_source(self, filename: str) -> bool:
        """Any of Portal's own modules, those that run for the program included."""
        return self._portal_role(filename) is not None

    def _portal_role(self, filename: str) -> str | None:
        """``"at work"``, ``"for the program"`` (:data:`_FOR_THE_PROGRAM`), or None for code
        that is not Portal's; one path lookup per file."""
        if filename in self._portal:
            return self._portal[filename]
        real = os.path.realpath(filename)
        role = None
        if real.startswith(_PORTAL_ROOT):
            role = "for the program" if real in _FOR_THE_PROGRAM else "at work"
        self._portal[filename] = role
        return role

    def is_carried_code(self, code: CodeType) -> bool:
        return self.is_carried_file(code.co_filename)

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
