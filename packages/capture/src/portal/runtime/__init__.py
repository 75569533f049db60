"""Portal's runtime: ``python -m portal.runtime run SCRIPT`` runs a script that Portal can pause
and resume; ``rt`` tells the script whether a pause is wanted, ``remake`` carries an object that
owns a thread or a process as what made it."""

from __future__ import annotations

from portal.runtime._remake import remake
from portal.runtime._rt import Runtime, rt

__all__ = ["Runtime", "remake", "rt"]
