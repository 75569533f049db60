"""Logging configuration: each configured logger's level, handlers, filters and flags, and
``logging.disable``.

Loggers pickle by name already (``getLogger(name)`` in the new process); what a checkpoint lacks
is their configuration, and handlers hold a lock, which pickle refuses. So:

* a reducer rebuilds any ``logging.Handler`` from its attributes with a fresh lock, registered
  with logging's shutdown flush like a new handler. A handler held in the program's globals and
  attached to a logger is one object in the one pickle, so it stays one object after a resume;
* a ``StreamHandler`` on ``sys.stdout``/``sys.stderr`` is re-bound to the new process's stream
  (the checkpoint pickler carries the standard streams by reference); one on any other stream
  carries it as any value of the program: an open file of the working directory is reopened
  where it stood (:mod:`.files`), any other open stream defers the pause, naming it;
* a ``FileHandler`` (and its subclasses: rotating handlers) is re-created on the same path in
  append mode, its file opened at its first record, so the log goes on where it stopped;
  capture flushes every handler first, because a paused process exits without flushing them;
* formatters and filters pickle as they are (a user's subclass by value).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from portal.core.specs import CaptureExtensionSpec, SerializerSpec

__all__ = ["capture_logging", "reduce_handler", "restore_logging", "serializer_specs", "specs"]

# Attributes of a handler that belong to the process: rebuilt, never pickled.
_PROCESS_ATTRS = frozenset({"lock"})


def reduce_handler(handler: logging.Handler) -> Any:
    state = {k: v for k, v in vars(handler).items() if k not in _PROCESS_ATTRS}
    if isinstance(handler, logging.FileHandler):
        state["stream"] = None  # reopened by the new process at the first record
        if state.get("mode") == "w":  # truncating again would lose the log written so far
            state["mode"] = "a"
    return (_rebuild_handler, (type(handler), state))


def _rebuild_handler(cls: type[logging.Handler], state: dict[str, Any]) -> logging.Handler:
    handler = cls.__new__(cls)
    handler.__dict__.update(state)
    handler.createLock()
    # What Handler.__init__ does: flushed and closed at shutdown, found by name.
    logging._addHandlerRef(handler)  # type: ignore[attr-defined]
    name = state.get("_name")
    if name:
        with logging._lock:  # type: ignore[attr-defined]
            logging._handlers[name] = handler  # type: ignore[attr-defined]
    return handler


_LoggerState = tuple[str, int, bool, bool, list[logging.Handler], list[Any]]


def _configured(logger: logging.Logger) -> bool:
    return bool(
        logger.level or logger.handlers or logger.filters or not logger.propagate or logger.disabled
    )


def capture_logging() -> dict[str, Any]:
    loggers: list[logging.Logger] = [logging.root]
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger) and _configured(logger):
            loggers.append(logger)
    states: list[_LoggerState] = []
    for logger in loggers:
        for handler in logger.handlers:
            # A broken handler loses its own records, never the checkpoint.
            with contextlib.suppress(Exception):
                handler.flush()
        states.append(
            (
                logger.name,
                logger.level,
                logger.propagate,
                logger.disabled,
                list(logger.handlers),
                list(logger.filters),
            )
        )
    return {"disable": logging.root.manager.disable, "loggers": states}


def restore_logging(state: dict[str, Any]) -> None:
    # Restored after the working-directory files: a log file inside the job's directory is
    # reopened in the directory the job resumed in (a new machine's), not the old absolute path.
    from portal.capture.extensions.workdir import relocate

    logging.disable(state["disable"])
    for name, level, propagate, disabled, handlers, filters in state["loggers"]:
        for handler in handlers:
            if isinstance(handler, logging.FileHandler) and handler.stream is None:
                handler.baseFilename = relocate(handler.baseFilename)
        logger = logging.root if name == "root" else logging.getLogger(name)
        logger.setLevel(level)
        logger.propagate = propagate
        logger.disabled = disabled
        logger.handlers[:] = handlers
        logger.filters[:] = filters


def specs() -> list[CaptureExtensionSpec]:
    return [
        CaptureExtensionSpec(
            name="logging_config",
            capture=capture_logging,
            restore=restore_logging,
            modules=("logging",),
            description="logger levels, handlers, formatters and filters; logging.disable",
        )
    ]


def serializer_specs() -> list[SerializerSpec]:
    return [
        SerializerSpec(
            name="capture_logging",
            reducers={"logging.Handler": reduce_handler},
            description="logging handlers rebuilt with a fresh lock (files reopened to append)",
        )
    ]
