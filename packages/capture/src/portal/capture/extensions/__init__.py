"""Built-in capture extensions: process-level state that lives outside the program's frames and
globals, so the one pickle of a checkpoint would not carry it on its own.

Each family is a small module with a ``specs()`` function returning portal-spot-core spec objects;
:mod:`portal.capture.plugin` registers them through the ``portal`` hooks exactly as a
third-party plugin would. A family whose library the program never imported costs nothing: its
spec names the library in ``modules=`` and the engine skips it at checkpoint time, and its
module here imports the library only inside ``capture``/``restore``.

State that is worth carrying only once the program changed it is taken relative to a
*baseline* read when the specs are built (the runtime builds them before the script runs, and
again in a resumed process before the state is restored), so a setting the program never
touched keeps the value the new machine gives it.
"""

from __future__ import annotations

__all__: list[str] = []
