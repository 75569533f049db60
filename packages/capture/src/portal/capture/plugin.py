"""portal-capture's built-in capture plugins, registered through portal-core's hooks exactly as a
third-party plugin would be (entry point ``capture`` in the ``portal`` group).

Building the specs imports no library: each family names its modules in ``modules=`` (and its
reducers by type name), so support for numpy costs nothing to a program that never imported it.
The specs are built when the runtime loads the plugins, before the script runs (and, in a
resumed process, before its state is restored): that is the baseline against which the program's
changes to the environment and settings are measured.
"""

from __future__ import annotations

from portal.capture.extensions import environment, logging_state, rng, settings
from portal.core.hookspecs import hookimpl
from portal.core.specs import CaptureExtensionSpec, SerializerSpec

__all__ = ["portal_capture_extensions", "portal_serializers"]


@hookimpl
def portal_capture_extensions() -> list[CaptureExtensionSpec]:
    # Environment first: later restores (a FileHandler's relative path, say) see the program's
    # own directory and variables.
    return [
        *environment.specs(),
        *rng.specs(),
        *settings.specs(),
        *logging_state.specs(),
    ]


@hookimpl
def portal_serializers() -> list[SerializerSpec]:
    return [*rng.serializer_specs(), *logging_state.serializer_specs()]
