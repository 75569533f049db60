"""``portal.runtime.rt``: the running script's view of Portal."""

from __future__ import annotations

# No runtime import of typing: ``python -m portal.runtime`` imports this package before its
# ``__main__`` can install the early SIGTERM handler (portal.runtime._early), and typing alone
# would add 5-15 ms to that window.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    class _PauseSource(Protocol):
        def pending(self) -> bool: ...


__all__ = ["Runtime", "rt"]


class Runtime:
    """What a script may ask Portal while it runs.

    Pickled by reference, so a script may keep ``rt`` in a global across a pause.
    """

    def __init__(self) -> None:
        self._engine: _PauseSource | None = None

    def _attach(self, engine: _PauseSource | None) -> None:
        self._engine = engine

    @property
    def active(self) -> bool:
        """Whether the script runs under ``python -m portal.runtime``."""
        return self._engine is not None

    def pending(self) -> bool:
        """True while a real pause is wanted (a notice, a node's request), until its deadline.

        A script that holds something a checkpoint cannot carry (a child process, a socket) may
        release it when this turns true, so the pause can proceed. False outside Portal.
        """
        engine = self._engine
        return engine is not None and engine.pending()

    def __reduce__(self) -> str:
        return "rt"

    def __repr__(self) -> str:
        return f"<portal.runtime.rt active={self.active} pending={self.pending()}>"


#: The runtime singleton.
rt = Runtime()
