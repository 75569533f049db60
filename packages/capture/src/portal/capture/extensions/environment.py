"""The process environment the program changed: current directory, ``sys.path``, ``os.environ``.

Each is carried as the program's *changes*, applied on top of what the new machine gives the
resumed process, because the two machines need not agree on everything (a different home, a
different ``PATH``, a node-set variable):

* ``os.environ``: every variable the program set, changed or deleted since the run started
  (across every resume of the run) with its value now (``None``: deleted). At resume those
  values are applied over the new machine's environment: the program's changes win; a variable
  the program never touched keeps the new machine's value, even when it differs from the old
  machine's. Variables a library sets to find a resource of this process (``WANDB_SERVICE``:
  the address of the wandb service this process started, :data:`PROCESS_BOUND_VARIABLES`) are
  not carried: the resumed process makes its own, and the old address led its ``run.log()`` to
  a service that was gone.
* ``sys.path``: the entries the program added, in their place relative to the interpreter's own
  entries, which are the new machine's; entries of the interpreter's that the program removed
  stay removed.
* the current directory: restored when it exists on the new machine (the runtime also starts a
  resumed script there); otherwise the process stays where it started and says so on stderr.
"""

from __future__ import annotations

import os
import sys

from portal.core.specs import CaptureExtensionSpec

__all__ = ["PROCESS_BOUND_VARIABLES", "EnvironState", "SysPathState", "specs"]

#: Variables a library sets to reach a resource of this very process, which does not travel.
PROCESS_BOUND_VARIABLES = frozenset({"WANDB_SERVICE"})


class EnvironState:
    """``os.environ`` changes since the start of the run (see module docstring)."""

    def __init__(self) -> None:
        self.baseline = dict(os.environ)
        # Variables changed before a resume: still the program's even if the new machine's
        # environment happens to give them the same value.
        self.carried: set[str] = set()

    def capture(self) -> dict[str, str | None]:
        current = os.environ
        names = set(self.carried)
        names.update(k for k, v in current.items() if self.baseline.get(k) != v)
        names.update(k for k in self.baseline if k not in current)
        return {k: current.get(k) for k in sorted(names - PROCESS_BOUND_VARIABLES)}

    def restore(self, changes: dict[str, str | None]) -> None:
        for name, value in changes.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self.carried.update(changes)


class SysPathState:
    """``sys.path`` as the program left it, relative to the interpreter's own entries."""

    def __init__(self) -> None:
        self.baseline = list(sys.path)

    def capture(self) -> dict[str, list[str]]:
        return {"path": list(sys.path), "start": list(self.baseline)}

    def restore(self, state: dict[str, list[str]]) -> None:
        old_start = set(state["start"])
        removed = old_start - set(state["path"])
        block = [p for p in self.baseline if p not in removed]
        result: list[str] = []
        placed = False
        for entry in state["path"]:
            if entry in old_start:
                if not placed:
                    result.extend(block)
                    placed = True
            else:
                result.append(entry)
        if not placed:
            result.extend(block)
        sys.path[:] = list(dict.fromkeys(result))  # first occurrence wins, as imports see it


def _capture_cwd() -> str:
    return os.getcwd()


def _restore_cwd(path: str) -> None:
    # Restored after the working-directory files (plugin order): a directory inside the job's
    # working directory is entered where that directory now is (a resume on a new machine).
    from portal.capture.extensions.workdir import relocate

    path = relocate(path)
    try:
        os.chdir(path)
    except OSError as exc:
        print(
            f"portal: note: the program's directory {path} cannot be entered on this machine "
            f"({exc.strerror}); it continues in {os.getcwd()}",
            file=sys.stderr,
            flush=True,
        )


def specs() -> list[CaptureExtensionSpec]:
    environ = EnvironState()
    path = SysPathState()
    return [
        CaptureExtensionSpec(
            name="process_cwd",
            capture=_capture_cwd,
            restore=_restore_cwd,
            description="the current directory",
        ),
        CaptureExtensionSpec(
            name="process_sys_path",
            capture=path.capture,
            restore=path.restore,
            description="sys.path entries the program added or removed",
        ),
        CaptureExtensionSpec(
            name="process_environ",
            capture=environ.capture,
            restore=environ.restore,
            description="environment variables the program set, changed or deleted",
        ),
    ]
