"""What the providers share when they call their cloud's API from the control plane (the
lost-job rules' machine checks, the vCPU listings): the cloud's own SDK lives in each provider's
``api`` extra, installed where the control plane runs, and is imported only when asked. Where it
is missing, the question has no answer (``None``: a job is never called lost for it) and the
log says once what to install."""

from __future__ import annotations

import logging
import threading

__all__ = ["sdk_missing"]

log = logging.getLogger("portal.providers")

_said: set[str] = set()
_lock = threading.Lock()


def sdk_missing(exc: ImportError, *, api: str, extra: str) -> None:
    """Log once per ``extra`` that ``api`` cannot be asked because ``exc``'s module is missing."""
    with _lock:
        if extra in _said:
            return
        _said.add(extra)
    log.warning(
        "cannot ask %s: %s is not installed; install %s where the control plane runs",
        api,
        exc.name or exc,
        extra,
    )
