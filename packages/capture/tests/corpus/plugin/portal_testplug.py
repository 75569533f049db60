"""A test plugin: a reducer registered by type name and a capture extension."""
import threading

from portal.core.hookspecs import hookimpl
from portal.core.specs import CaptureExtensionSpec, SerializerSpec

COUNTER = {"n": 0}


class Handle:
    """Unpicklable by default (it holds a lock, held); the plugin's reducer rebuilds it by
    name."""

    def __init__(self, name):
        self.name = name
        self.lock = threading.Lock()
        self.lock.acquire()  # an unlocked one would travel (capture_locks)


def reduce_handle(handle):
    return (Handle, (handle.name,))


@hookimpl
def portal_serializers():
    return [SerializerSpec(name="testplug", reducers={"portal_testplug.Handle": reduce_handle})]


@hookimpl
def portal_capture_extensions():
    return [
        CaptureExtensionSpec(
            name="testplug_counter",
            capture=lambda: dict(COUNTER),
            restore=COUNTER.update,
            modules=("portal_testplug",),
        )
    ]
