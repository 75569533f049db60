"""Portal's runtime: ``python -m portal.runtime run SCRIPT`` runs a script that Portal can pause
and resume; ``rt`` tells the script whether a pause is wanted."""

from __future__ import annotations

from portal.runtime._rt import Runtime, rt

__all__ = ["Runtime", "rt"]
