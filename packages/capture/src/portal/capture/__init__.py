"""Portal's capture engine: pause a running script at a safe point, checkpoint its live state in
one pickle, and continue it in a new process.

The public surface: :func:`probe` (walk the state as a checkpoint would, write nothing),
:class:`Problem`, :class:`CheckpointImage` with :func:`read_image` / :func:`write_image` /
:func:`iter_image_chunks`, and :class:`Engine`. ``python -m portal.runtime`` runs scripts with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from portal.core.plugins import lazy_exports

if TYPE_CHECKING:
    from portal.capture.engine import EXIT_PAUSED, Engine
    from portal.capture.image import (
        FORMAT_VERSION,
        CheckpointImage,
        Header,
        iter_image_chunks,
        read_image,
        write_image,
    )
    from portal.capture.probing import probe
    from portal.capture.problems import Problem

#: Each public name and its module, imported on first use: loading the plugin
#: (``portal.capture.plugin``, with every ``portal`` command) imports none of the engine.
_EXPORTS = {
    "EXIT_PAUSED": "engine",
    "Engine": "engine",
    "FORMAT_VERSION": "image",
    "CheckpointImage": "image",
    "Header": "image",
    "iter_image_chunks": "image",
    "read_image": "image",
    "write_image": "image",
    "probe": "probing",
    "Problem": "problems",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)

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
