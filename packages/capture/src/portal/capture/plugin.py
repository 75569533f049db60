"""portal-capture's built-in capture plugins, registered through portal-spot-core's hooks exactly as a
third-party plugin would be (entry point ``capture`` in the ``portal`` group).

Building the specs imports no library: each family names its modules in ``modules=`` (and its
reducers by type name), so support for numpy costs nothing to a program that never imported it.
The specs are built when the runtime loads the plugins, before the script runs (and, in a
resumed process, before its state is restored): that is the baseline against which the program's
changes to the environment and settings are measured.
"""

from __future__ import annotations

from portal.capture.extensions import (
    arrays,
    compiled,
    environment,
    files,
    frameworks,
    iterators,
    logging_state,
    loops,
    mpmath_state,
    rng,
    settings,
    signals,
    stdlib_objects,
    tensors,
    torch_state,
    trackers,
    workdir,
    workers,
    writers,
)
from portal.core.hookspecs import hookimpl
from portal.core.specs import CaptureExtensionSpec, SerializerSpec

__all__ = ["portal_capture_extensions", "portal_serializers"]


@hookimpl
def portal_capture_extensions() -> list[CaptureExtensionSpec]:
    # Restored in this order. The working directory's files first: they are back before a log
    # handler is re-created in append mode, and paths inside the old directory (the current
    # directory, a log file's) are mapped into the one the job resumed in (``workdir.relocate``).
    # The environment next: later restores (a FileHandler's relative path, say) see the
    # program's own directory and variables. Before anything is read, what a library still
    # buffers for files of the working directory is written (MLflow's asynchronous logging).
    flush_trackers, trackers_state = trackers.specs()
    return [
        *flush_trackers,
        *workdir.specs(),
        *environment.specs(),
        *rng.specs(),
        *torch_state.specs(),
        *compiled.specs(),
        *frameworks.specs(),
        *loops.specs(),
        *mpmath_state.specs(),
        *settings.specs(),
        *signals.specs(),
        *logging_state.specs(),
        *trackers_state,
    ]


@hookimpl
def portal_serializers() -> list[SerializerSpec]:
    return [
        *rng.serializer_specs(),
        *logging_state.serializer_specs(),
        *arrays.serializer_specs(),
        *tensors.serializer_specs(),
        *loops.serializer_specs(),
        *iterators.serializer_specs(),
        *stdlib_objects.serializer_specs(),
        *files.serializer_specs(),
        *frameworks.serializer_specs(),
        *writers.serializer_specs(),
        *workers.serializer_specs(),
        *compiled.serializer_specs(),
        *trackers.serializer_specs(),
        *mpmath_state.serializer_specs(),
    ]
