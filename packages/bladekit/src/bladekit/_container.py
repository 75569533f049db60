"""A container: one attempt of a run, in its own process (``python -m bladekit._container``).

Started by the runner with the run folder and the attempt number. Before anything else (before
user code can start threads) it gives itself a private mount table where each volume's folder
shows at its mount path (:mod:`bladekit._namespace`; real folders where that is unavailable, see
:mod:`bladekit.mounts`). It then syncs the run's volumes, builds the class instance and runs its ``enter`` hooks (which is where a checkpoint is loaded),
says Ready, then serves calls one at a time until told to close.

It dies with its caller: first thing, it asks the kernel for SIGKILL when its parent (the
caller's container-starting thread, which lives as long as the caller) dies (Linux's
``PR_SET_PDEATHSIG``, as Portal's node does for a job), and exits if the caller is already gone.

Preemption: a watcher thread polls the attempt's notice folder with portal-spot-core's
:class:`~portal.providers.local.LocalNoticeSource`. On a notice the on_preempt callback
runs in the *main* thread, so it sees a consistent instance, never one being changed under it:

- between calls, at once;
- during a call, as soon as the call returns, or at the latest halfway through the grace window,
  when the call is interrupted at the next bytecode (a SIGUSR1 handler runs the callback right
  there, on the live state) and is retried by the next attempt.

Then the container reports Preempted and exits. The runner, not this process, enforces the end of
the grace window (a callback that overruns is killed), so a hung callback cannot outlive it.
A ``gpu_class="reserved"`` container logs each notice it gets and ignores it.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

import cloudpickle

from bladekit import _namespace, mounts
from bladekit.errors import SerializationError
from bladekit.protocol import (
    Call,
    CallFailed,
    CallResult,
    Close,
    ContainerSpec,
    Preempted,
    Ready,
    StartFailed,
    TargetRef,
    read_frame,
    write_frame,
)
from bladekit.records import CALLER_PID_ENV
from bladekit.wire import decode_request
from portal.core.domain import Notice
from portal.providers.local import LocalNoticeSource

log = logging.getLogger("bladekit.container")

_EOF = object()


class _NoticeArrived:
    def __init__(self, notice: Notice) -> None:
        self.notice = notice


def _failure(exc: BaseException) -> tuple[bytes | None, str, str]:
    """The exception pickled (when it survives a round trip), its type name and traceback."""
    text = "".join(traceback.format_exception(exc))
    name = f"{type(exc).__module__}.{type(exc).__qualname__}"
    try:
        data = cloudpickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)  # exceptions with required init args often pickle but fail to load
    except Exception:
        return None, name, text
    return data, name, text


def private_mounts(run_dir: Path, attempt: int) -> str | None:
    """Show each volume's attempt folder at its mount path, privately; None when done (or there
    are no volumes), else why real folders are used instead (direct mode).

    Raises :class:`~bladekit.mounts.MountError` when ``BLADEKIT_MOUNTS=namespace`` and that is
    not possible here, or setting up the view failed midway.
    """
    chosen = mounts.mode()
    if chosen == "direct":
        return f"{mounts.MOUNT_MODE_ENV}=direct"
    paths = list(decode_request((run_dir / "request.json").read_bytes()).volumes)
    if not paths:
        return None
    binds = [(path, mounts.host_folder(run_dir, attempt, path)) for path in paths]
    try:
        _namespace.enter(binds, scratch=mounts.attempt_dir(run_dir, attempt) / "root")
    except _namespace.NamespaceUnavailable as exc:
        if chosen == "namespace":
            raise mounts.MountError(
                f"cannot mount {', '.join(paths)} privately ({mounts.MOUNT_MODE_ENV}=namespace): "
                f"{exc.strerror}. Unset {mounts.MOUNT_MODE_ENV} to fall back to real folders",
                details={"paths": paths},
            ) from None
        return str(exc.strerror)
    except OSError as exc:
        raise mounts.MountError(
            f"setting up the container's private mounts for {', '.join(paths)} failed: {exc}. "
            f"Set {mounts.MOUNT_MODE_ENV}=direct to use real folders instead",
            details={"paths": paths},
        ) from exc
    return None


class Container:
    def __init__(
        self,
        spec: ContainerSpec,
        *,
        out_fd: int,
        in_fd: int,
        notice_dir: Path,
        direct_mounts: str | None = "no private namespace",
    ) -> None:
        self.spec = spec
        #: None: the mount paths are this container's own (namespace); else why they are not.
        self.direct_mounts = direct_mounts
        self.out_fd = out_fd
        self.in_fd = in_fd
        self.notice_dir = notice_dir
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.instance: Any = None
        self.mount_locks: list[int] = []
        # Written by the main thread only; read by the watcher (a stale read costs one poll).
        self.current_call: int | None = None
        self.in_user_code = False
        self.notice: Notice | None = None
        self.preempting = False

    # --- startup ----------------------------------------------------------------------------------

    def start(self) -> bool:
        try:
            if isinstance(self.spec.target, TargetRef):
                self.spec = dataclasses.replace(self.spec, target=self.spec.target.resolve())
            for path, volume in self.spec.volumes.items():
                if self.direct_mounts is not None:
                    self.mount_locks.append(self._acquire(path, volume.name))
                volume.mount(path)
            if self.spec.kind == "cls":
                self.instance = self.spec.target(*self.spec.init_args, **self.spec.init_kwargs)
                for name in self.spec.enter:
                    getattr(self.instance, name)()
        except BaseException as exc:
            error, name, text = _failure(exc)
            write_frame(self.out_fd, StartFailed(error=error, type_name=name, traceback_text=text))
            return False
        signal.signal(signal.SIGUSR1, self._on_interrupt)
        threading.Thread(target=self._read_calls, name="bladekit-calls", daemon=True).start()
        threading.Thread(target=self._watch, name="bladekit-notices", daemon=True).start()
        write_frame(self.out_fd, Ready(pid=os.getpid()))
        return True

    def _acquire(self, path: str, volume_name: str) -> int:
        try:
            return mounts.acquire(path, volume_name)
        except mounts.MountError as exc:
            raise mounts.MountError(
                f"{exc} (bladekit used a real folder because a private mount namespace, which "
                f"needs no root, is not available here: {self.direct_mounts})",
                details=exc.details,
            ) from None

    # --- the main loop ----------------------------------------------------------------------------

    def serve(self) -> None:
        while True:
            item = self.inbox.get()
            if item is _EOF or isinstance(item, Close):
                return
            if isinstance(item, _NoticeArrived):
                self._preempt(interrupted_call=None)  # does not return
            if isinstance(item, Call):
                self._run_call(item)
                if self.notice is not None:
                    self._preempt(interrupted_call=None)

    def _run_call(self, call: Call) -> None:
        self.current_call = call.seq
        try:
            fn = self.spec.target if call.method is None else getattr(self.instance, call.method)
            self.in_user_code = True
            try:
                value = fn(*call.args, **call.kwargs)
            finally:
                self.in_user_code = False
        except BaseException as exc:  # SystemExit too: the user's outcome, reported to the caller
            error, name, text = _failure(exc)
            message: Any = CallFailed(
                seq=call.seq, error=error, type_name=name, traceback_text=text
            )
        else:
            message = CallResult(seq=call.seq, value=value)
        try:
            write_frame(self.out_fd, message)
        except Exception as exc:  # the return value (or exception) could not be pickled
            what = "return value" if isinstance(message, CallResult) else "exception"
            problem = SerializationError(
                f"the {what} of {self._call_name(call)} ({type(getattr(message, 'value', exc)).__name__}) "
                f"could not be pickled to send it back: {exc}. Return plain data (numbers, "
                "strings, lists, dicts, dataclasses, arrays) instead",
                details={"function": self._call_name(call)},
            )
            error, name, text = _failure(problem)
            write_frame(
                self.out_fd,
                CallFailed(seq=call.seq, error=error, type_name=name, traceback_text=text),
            )
        finally:
            self.current_call = None

    def _call_name(self, call: Call) -> str:
        return self.spec.name if call.method is None else f"{self.spec.name}.{call.method}"

    def _read_calls(self) -> None:
        with os.fdopen(self.in_fd, "rb") as stream:
            while True:
                message = read_frame(stream)
                if message is None:
                    self.inbox.put(_EOF)
                    return
                self.inbox.put(message)

    # --- preemption -------------------------------------------------------------------------------

    def _watch(self) -> None:
        source = LocalNoticeSource(self.notice_dir)
        while True:
            for notice in source.poll(0.1):
                if notice.cancelled:
                    log.info(
                        "notice %s withdrawn (ignored: the container is already going)", notice.id
                    )
                    continue
                if not self.spec.preemptible:
                    log.warning(
                        "%s runs on gpu_class='reserved' capacity, which is never preempted: "
                        "notice %s ignored",
                        self.spec.name,
                        notice.id,
                    )
                    continue
                if self.notice is None:
                    self._on_notice(notice)

    def _on_notice(self, notice: Notice) -> None:
        self.notice = notice
        self.inbox.put(_NoticeArrived(notice))
        call = self.current_call
        if call is None:
            return
        # Let a running call finish if it can do so in the first half of the grace window.
        interrupt_at = time.time() + max(0.0, notice.deadline - time.time()) / 2
        while time.time() < interrupt_at:
            if self.current_call != call:
                return
            time.sleep(0.02)
        if self.current_call == call:
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)

    def _on_interrupt(self, signum: int, frame: FrameType | None) -> None:
        # Runs in the main thread between two bytecodes of the user's call.
        if self.in_user_code and self.notice is not None and not self.preempting:
            self._preempt(interrupted_call=self.current_call)

    def _preempt(self, *, interrupted_call: int | None) -> None:
        assert self.notice is not None
        self.preempting = True
        callback, name = self._callback()
        error: str | None = None
        started = time.monotonic()
        if callback is not None:
            try:
                callback()
            except BaseException as exc:
                error = "".join(traceback.format_exception(exc))
        write_frame(
            self.out_fd,
            Preempted(
                notice_id=self.notice.id,
                callback=name,
                callback_error=error,
                callback_s=time.monotonic() - started,
                interrupted_call=interrupted_call,
            ),
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def _callback(self) -> tuple[Any, str | None]:
        hook = self.spec.on_preempt
        if hook is None:
            return None, None
        if self.spec.kind == "cls":
            return getattr(self.instance, hook), f"{self.spec.name}.{hook}"
        return hook, getattr(hook, "__qualname__", repr(hook))


def die_with_caller() -> None:
    """Be killed when the caller dies (even by SIGKILL): a container nobody waits on would run on
    holding its GPU, its mounts and its volume's lock."""
    with contextlib.suppress(Exception):  # not Linux: no prctl (the check below still holds)
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    caller = os.environ.get(CALLER_PID_ENV, "")
    if caller.isdigit() and os.getppid() != int(caller):  # it died before the line above
        os._exit(1)


def main(argv: list[str]) -> int:
    die_with_caller()
    run_dir, attempt = Path(argv[0]), int(argv[1])
    # fd 1 becomes the private reply channel; user prints go to stderr instead.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    in_fd = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    logging.basicConfig(level=logging.INFO, format="bladekit container: %(message)s")
    try:
        # First: unpickling the spec may import user modules, which may start threads.
        direct_mounts = private_mounts(run_dir, attempt)
        spec: ContainerSpec = pickle.loads((run_dir / "spec.pkl").read_bytes())
    except BaseException as exc:
        error, name, text = _failure(exc)
        write_frame(out_fd, StartFailed(error=error, type_name=name, traceback_text=text))
        return 1
    container = Container(
        spec,
        out_fd=out_fd,
        in_fd=in_fd,
        notice_dir=run_dir / "attempts" / str(attempt) / "notices",
        direct_mounts=direct_mounts,
    )
    if not container.start():
        return 1
    container.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
