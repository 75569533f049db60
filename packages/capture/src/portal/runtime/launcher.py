"""Running and resuming a script as ``python SCRIPT`` would, with Portal armed.

The script sees a normal environment: ``__name__ == "__main__"``, ``__file__``, ``sys.argv`` as
``[SCRIPT, ARGS...]`` and ``sys.path[0]`` its directory. Its exceptions print a traceback that
starts at the script (the runtime's frames are left out) and exit with 1; ``sys.exit(n)`` exits
with ``n``.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import os
import sys
import traceback
import types
from collections.abc import Callable
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import CodeType
from typing import Any, Final

from portal.capture import _plugins
from portal.capture.distributed.rank import STORE_ENV, RankSession, distributed_reducers
from portal.capture.distributed.rank import from_environment as rank_session
from portal.capture.engine import PROBE_BUDGET_S, Engine, Event
from portal.capture.errors import CheckpointRestoreError
from portal.capture.extensions.signals import reinstall_after_arming
from portal.capture.extensions.workdir import set_job_root
from portal.capture.image import check_interpreter, check_resumable_here, read_image
from portal.capture.probing import set_active_context
from portal.capture.resume import RESUMED_CODE, restore
from portal.capture.snapshot import CaptureContext, CaptureExtension
from portal.capture.usercode import UserCode
from portal.core.errors import InvalidArgumentError, PortalError
from portal.runtime import _early
from portal.runtime._rt import rt
from portal.runtime.control import CONTROL_ENV, ControlChannel
from portal.runtime.protocol import take_restored_mark
from portal.runtime.rankset import part_span

__all__ = ["GRACE_ENV", "PROBE_BUDGET_ENV", "resume_script", "run_script"]

GRACE_ENV: Final = "PORTAL_RUNTIME_SIGTERM_GRACE_S"
#: The checkpoint check's time budget in seconds (default 5; tests make it small).
PROBE_BUDGET_ENV: Final = "PORTAL_CAPTURE_PROBE_BUDGET_S"


def _main_module(script: str) -> types.ModuleType:
    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__loader__ = SourceFileLoader("__main__", script)
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__spec__ = None
    main.__package__ = None
    sys.modules["__main__"] = main
    return main


def _arm(
    context: CaptureContext,
    checkpoint: str,
    control: str | None,
    *,
    rehearse: bool = False,
    session: RankSession | None = None,
) -> Engine:
    if session is not None:
        control = None  # a rank's requests come from its launcher, through the store
    try:
        channel = ControlChannel(control) if control else None
    except OSError as exc:
        raise InvalidArgumentError(
            f"cannot listen on the control socket {control!r}: {exc.strerror or exc}. Give "
            "--control (or PORTAL_RUNTIME_CONTROL) a path in an existing, writable directory, "
            "at most 107 bytes long"
        ) from exc

    def notify(event: Event) -> None:
        if channel is not None:
            channel.send(event)
        if session is not None:
            session.forward(event)

    grace = float(os.environ.get(GRACE_ENV, "30"))
    engine = Engine(
        context,
        checkpoint_path=os.path.abspath(checkpoint),
        notify=notify,
        sigterm_grace=grace,
        probe_budget=float(os.environ.get(PROBE_BUDGET_ENV, PROBE_BUDGET_S)),
        rehearse=rehearse,
        before_exit=channel.close if channel else (lambda: None),
        group=session,
    )
    engine.arm()
    rt._attach(engine)
    set_active_context(context)
    if channel is not None:
        channel.start(engine)
        _closers.append(channel.close)
    if session is not None:
        session.part_path = engine.checkpoint_path.as_posix()
        session.start(engine)
        _closers.append(session.close)
    noticed = _early.take()
    if noticed is not None:
        # A SIGTERM came while the runtime was starting (before the engine's handler was in
        # place): the pause it asks for, with the grace counted from the notice, is taken at the
        # first safe point (the script's first line; for resume, where the checkpoint paused).
        engine.request_pause(noticed + grace, "sigterm")
    return engine


def _reducers(session: RankSession | None) -> dict[str, Callable[[Any], Any]]:
    """The plugins' reducers; a rank's also carry its torch.distributed objects (process
    groups, DDP, collectives' Work), which only a rank can make again at resume."""
    reducers = _plugins.load_reducers()
    if session is not None:
        reducers.update(distributed_reducers())
    return reducers


def _extensions(session: RankSession | None) -> list[CaptureExtension]:
    """The capture extensions; a rank carries the working directory only as rank 0."""
    extensions = _plugins.load_capture_extensions()
    return extensions if session is None else session.share_workdir(extensions)


_closers: list[Callable[[], None]] = []  # runtime singleton: what to close when the script ends


def _finish(engine: Engine) -> None:
    engine.finish()
    while _closers:
        _closers.pop()()
    # Nothing of the runtime's keeps the engine (a reference cycle, through its context to the
    # script's namespace) reachable any more: it is collected with the modules at exit, not in
    # the interpreter's very last collection, where CPython 3.12.0-3.12.2 crash freeing an
    # itertools.tee the script still held (gh-115874).
    rt._attach(None)
    set_active_context(None)


def _set_aside_portals_objects() -> None:
    """Move every object alive now out of the cyclic collector's scans (``gc.freeze()``).

    Called just before the script's own objects come (its first line; for a resume, before the
    checkpoint is loaded), so what is set aside is the interpreter's start-up and Portal's own
    machinery: the capture engine, its plugins and their modules, some 18,000 objects that plain
    ``python SCRIPT`` does not have. Without this, a script that allocates heavily pays for
    scanning them at every full collection (about 3% on a loop of comprehensions). The script's
    objects are collected exactly as before; frozen ones are still freed by reference counting.
    """
    gc.freeze()


def _execute(code: CodeType, namespace: dict[str, Any]) -> int:
    try:
        exec(code, namespace)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_globals is not namespace:
            tb = tb.tb_next  # the runtime's own frames: python SCRIPT would not show them
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        return 1
    return 0


def run_script(
    script: str,
    args: list[str],
    *,
    checkpoint: str,
    control: str | None = None,
    rehearse: bool = False,
) -> int:
    """Run ``script`` with ``args`` as ``python script args`` would, pausable. ``rehearse``:
    each checkpoint check also rehearses a real checkpoint (``capture_probe = full``)."""
    check_interpreter()
    set_job_root(os.getcwd())  # the job's working directory: its files travel
    path = os.path.abspath(script)
    try:
        with open(path, "rb") as fh:
            source = fh.read()
    except OSError as exc:
        print(f"portal: can't open file {script!r}: {exc}", file=sys.stderr)
        return 2
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        traceback.print_exception(type(exc), exc, None)
        return 1
    main = _main_module(path)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(path)
    session = rank_session()
    context = CaptureContext(
        user_code=UserCode(path),
        main_namespace=main.__dict__,
        entry_code=code,
        reducers=_reducers(session),
        extensions=_extensions(session),
        resumed=RESUMED_CODE,
    )
    engine = _arm(
        context,
        checkpoint,
        control or os.environ.get(CONTROL_ENV),
        rehearse=rehearse,
        session=session,
    )
    _set_aside_portals_objects()
    try:
        return _execute(code, main.__dict__)
    finally:
        _finish(engine)


def resume_script(
    checkpoint_in: str,
    *,
    checkpoint: str | None = None,
    control: str | None = None,
    rehearse: bool = False,
) -> int:
    """Continue the program saved in ``checkpoint_in`` from the statement after its pause."""
    check_interpreter()
    set_job_root(os.getcwd())  # before entering the old directory: files go here
    session: RankSession | None = None
    if os.environ.get(STORE_ENV):  # one rank of a set: its part, in place
        rank = int(os.environ["RANK"])
        image = read_image(checkpoint_in, span=part_span(checkpoint_in, rank))
        check_resumable_here(image.header, checkpoint_in)
        if image.header.rank is None:
            raise InvalidArgumentError(
                f"part {rank} of {checkpoint_in!r} is not a rank's checkpoint: resume the set "
                "with python -m portal.runtime resume SET (it starts every rank)"
            )
        session = rank_session(image.header.rank)
        assert session is not None
        # The groups first, on this attempt's rendezvous: the state refers to them.
        session.replay(image.header.rank)
    else:
        image = read_image(checkpoint_in)
        check_resumable_here(image.header, checkpoint_in)
    header = image.header
    sys.argv = list(header.argv)
    sys.path[0] = os.path.dirname(header.script)
    if os.path.isdir(header.cwd):
        os.chdir(header.cwd)
    main = _main_module(header.script)
    extensions = _extensions(session)
    _set_aside_portals_objects()
    try:
        restored = restore(image, main, extensions=extensions, path=checkpoint_in)
    except PortalError:
        raise
    except Exception as exc:
        raise _restore_failed(checkpoint_in, exc) from exc
    del image  # its buffers now belong to the restored objects
    _mark_restored()
    context = CaptureContext(
        user_code=UserCode(header.script),
        main_namespace=restored.main_namespace,
        entry_code=restored.module_code,
        reducers=_reducers(session),
        extensions=extensions,
        resumed=RESUMED_CODE,
    )
    engine = _arm(
        context,
        checkpoint or checkpoint_in,
        control or os.environ.get(CONTROL_ENV),
        rehearse=rehearse,
        session=session,
    )
    reinstall_after_arming()  # a SIGTERM handler of the program's own wins, as it did
    try:
        return _execute(restored.module_code, restored.main_namespace)
    finally:
        _finish(engine)


def _mark_restored() -> None:
    """Tell the node the restore is complete (:data:`RESTORED_ENV`): whatever fails from here
    on is the program's own."""
    mark = take_restored_mark()
    if mark:
        with contextlib.suppress(OSError):  # the node then blames the restore: no worse
            Path(mark).touch()


def _restore_failed(path: str, exc: BaseException) -> CheckpointRestoreError:
    """What a failed load says: the error, where it was raised, and the ways out."""
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        where = f" in {last.name} ({os.path.basename(last.filename)}:{last.lineno})"
    return CheckpointRestoreError(
        f"cannot resume from {path}: rebuilding the program's state failed{where}: "
        f"{type(exc).__name__}: {exc}. The checkpoint is unchanged. Resume where the same "
        "versions of the program's packages are installed as where it was paused, or keep "
        "the value that fails out of the state across a pause point"
    )
