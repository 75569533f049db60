"""Portal's capture engine: pause a running script at a safe point, checkpoint its live state in
one pickle, and continue it in a new process.

The public surface: :func:`probe` (walk the state as a checkpoint would, write nothing),
:class:`Problem`, :class:`CheckpointImage` with :func:`read_image` / :func:`write_image` /
:func:`iter_image_chunks`, and :class:`Engine`. ``python -m portal.runtime`` runs scripts with it.
"""

from __future__ import annotations

from portal.capture.engine import EXIT_PAUSED, Engine
from portal.capture.image import (
    FORMAT_VERSION,
    CheckpointImage,
    Header,
    iter_image_chunks,
    read_image,
    write_image,
)
from portal.capture.probe import probe
from portal.capture.problems import Problem

__all__ = [
    "EXIT_PAUSED",
    "FORMAT_VERSION",
    "CheckpointImage",
    "Engine",
    "Header",
    "Problem",
    "iter_image_chunks",
    "probe",
    "read_image",
    "write_image",
]
