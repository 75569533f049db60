"""A user package of the job's directory (restore order test).

Its modules need each other's globals, and ``events`` and ``engine`` import each other
(``events`` late, in a function, as packages do to break an import cycle), so neither one's
globals can all load before the other's: ``engine`` holds ``Events``, whose members are made
through code that needs ``events``'s globals, and ``events`` holds ``Engine``.
"""

from shop import engine  # noqa: F401
from shop.events import Events  # noqa: F401
