"""``python -m portal.runtime run --nproc-per-node N SCRIPT``: Portal as the launcher of a
multi-process (torchrun-style) job, pausing every rank at one consistent point.

The launcher is the one process the node sees: it serves the control socket and SIGTERM as a
single runtime does, and exits 75 once the job is paused, its checkpoint written. Below it:

- it hosts the rendezvous store (a ``torch.distributed.TCPStore`` on 127.0.0.1, a port the OS
  picks) and starts N ranks, each ``python -m portal.runtime run`` with torchrun's environment
  contract (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
  ``MASTER_ADDR``/``MASTER_PORT``, ``TORCHELASTIC_USE_AGENT_STORE``: the script's
  ``init_process_group()`` joins this store as a client, as under torchrun's agent);
- a pause request becomes ``request/N`` in the store; the ranks agree on where to pause
  (:mod:`portal.capture.distributed.rank`), each writes its part beside the checkpoint, and the
  launcher, once every part is written, writes the set (:mod:`portal.runtime.rankset`) and
  answers ``go``. Only then does any rank exit 75. A rank that cannot commit answers ``abort``
  instead (the first answer wins): every rank runs on, the earlier set stays in force;
- a rank that ends otherwise (a crash, a kill) ends the job as torchrun would: the other ranks
  are stopped (their peer is gone, their next collective would hang) and the launcher exits
  with the rank's status. A set being committed then is never written. Once the set is
  committed (the launcher answered ``go``), a rank that ends otherwise (killed on its way out)
  takes nothing with it: its part is in the set, and the job is paused.

Resuming (``python -m portal.runtime resume SET``) starts N ranks again, each from its part.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any, Final

import msgspec

from portal.capture.distributed.rank import (
    GO_CHECKPOINT,
    GO_PAUSE,
    LAUNCHER_ENV,
    PREFIX,
    STORE_ENV,
    armed_key,
    request_key,
    torch_distributed,
)
from portal.capture.engine import output_file_size
from portal.core.errors import InvalidArgumentError, PortalError
from portal.runtime import _early
from portal.runtime.control import CONTROL_ENV, ControlChannel
from portal.runtime.protocol import (
    EXIT_PAUSED,
    Abandoned,
    Checkpointed,
    Failed,
    NotCheckpointed,
    Paused,
    Pending,
    ProbeReport,
    decode_runtime_event,
)
from portal.runtime.rankset import PartEntry, RankSetMismatchError, read_manifest, write_set

__all__ = ["LauncherError", "resume_group", "run_group", "torchrun_refusal"]

_POLL_S: Final = 0.005
#: How often the launcher looks for the ranks' events, and for their parts while no pause
#: is pending (a rank may have been asked by a SIGTERM of its own).
_EVENTS_S: Final = 0.05
_STOP_GRACE_S: Final = 5.0
#: Set by torchrun's agent in every worker it starts.
_TORCHRUN_ENV: Final = "TORCHELASTIC_RUN_ID"


class LauncherError(PortalError):
    """A multi-process job that cannot be launched this way."""

    code = "CAPTURE_LAUNCHER"


def torchrun_refusal(environ: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """Why a runtime started by torchrun is refused (None when it was not)."""
    if _TORCHRUN_ENV not in environ or STORE_ENV in environ:
        return None
    return (
        "this script was started by torchrun. When a rank pauses it exits with 75, and "
        "torchrun's agent counts that as a failure and starts every rank again from its first "
        "line, losing the work. Let Portal launch the ranks instead: "
        "python -m portal.runtime run --nproc-per-node N SCRIPT (the same environment "
        "torchrun gives), without torchrun"
    )


def _check_nproc(nproc: int) -> None:
    if nproc < 1:
        raise InvalidArgumentError(
            f"--nproc-per-node {nproc}: a job needs at least 1 process per node; give the number "
            "of ranks to start, e.g. --nproc-per-node 2"
        )


def _torch_distributed() -> Any:
    try:
        dist = torch_distributed()
    except ImportError as exc:
        raise LauncherError(
            "--nproc-per-node starts torch.distributed ranks, and torch is not installed "
            f"here ({exc}). Install torch in the job's environment, or run one process "
            "without --nproc-per-node"
        ) from exc
    return dist


def _torch_version() -> str:
    _torch_distributed()  # imported, or refused by name
    return str(sys.modules["torch"].__version__)


class _Launcher:
    """The ranks of one attempt, and the store they share (see module docstring)."""

    def __init__(self, nproc: int, checkpoint: Path, control: str | None, grace: float) -> None:
        _check_nproc(nproc)
        dist = _torch_distributed()
        self.nproc = nproc
        self.checkpoint = checkpoint
        self.grace = grace
        self.store = dist.TCPStore(
            "127.0.0.1",
            0,
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=60),
        )
        self.parts_dir = checkpoint.parent / f".{checkpoint.name}.ranks"
        self.parts_dir.mkdir(parents=True, exist_ok=True)
        self._requests = 0
        self._deadline: float | None = None
        self._lock = threading.RLock()
        self._round = 0
        self._paused: Paused | None = None
        self._named_after_commit: set[int] = set()
        self._pending_sent = False
        self._abandoned_sent = False
        self._periodic: Path | None = None  # where a periodic set goes, while one is wanted
        self._not_checkpointed_sent = False
        self._probes: dict[int, ProbeReport] = {}
        self._stop = threading.Event()
        self._forwarder = threading.Thread()
        self.children: list[subprocess.Popen[bytes]] = []
        self.control = control
        self.channel: ControlChannel | None = None

    # -- what the control channel and SIGTERM ask (the engine's interface) ---------------------

    def _request(self, op: dict[str, Any]) -> None:
        with self._lock:
            self.store.set(request_key(self._requests), json.dumps(op))
            self._requests += 1

    def request_pause(self, deadline: float, source: str) -> None:
        with self._lock:
            current = self._deadline
            if current is not None and time.time() < current <= deadline:
                return  # the pending pause's earlier deadline holds
            self._deadline = deadline
            self._abandoned_sent = False
        self._request({"op": "pause", "deadline": deadline, "source": source})
        self._send(Pending(source=source, deadline=deadline))
        self._pending_sent = True

    def cancel(self, reason: str = "cancelled") -> None:
        with self._lock:
            if self._deadline is None:
                return
            self._deadline = None
        self._request({"op": "cancel", "reason": reason})

    def request_probe(self, deadline: float | None = None) -> None:
        """Every rank checks what its checkpoint could not carry; one report of them all."""
        with self._lock:
            self._probes.clear()
        self._request({"op": "probe", "deadline": deadline})

    def request_checkpoint(self, path: str, deadline: float | None = None) -> None:
        """A periodic checkpoint: the ranks agree on a safe point as for a pause, each writes
        its part, and the set goes to ``path``; the ranks run on."""
        with self._lock:
            self._periodic = Path(path)
            self._not_checkpointed_sent = False
        self._request({"op": "checkpoint", "deadline": deadline})

    def stop_probe_if_due(self, frame: FrameType | None = None) -> None:
        return None

    def note_obstacle(self, frame: FrameType | None) -> None:
        return None

    def expire(self) -> None:
        return None  # each rank abandons at the deadline itself, and says so

    def deadline(self) -> float | None:
        return self._deadline

    def pending(self) -> bool:
        deadline = self._deadline
        return deadline is not None and time.time() < deadline

    def _send(self, event: Any) -> None:
        if self.channel is not None:
            self.channel.send(event)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.request_pause(time.time() + self.grace, "sigterm")

    # -- the ranks ------------------------------------------------------------------------------

    def part_path(self, rank: int) -> Path:
        return self.parts_dir / f"rank{rank}.portal"

    def _environment(self, rank: int) -> dict[str, str]:
        env = dict(os.environ)
        env.pop(CONTROL_ENV, None)  # the launcher serves the node; ranks talk to the store
        env.update(
            {
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(self.nproc),
                "LOCAL_WORLD_SIZE": str(self.nproc),
                "GROUP_RANK": "0",
                "GROUP_WORLD_SIZE": "1",
                "ROLE_RANK": str(rank),
                "ROLE_WORLD_SIZE": str(self.nproc),
                "ROLE_NAME": "default",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(self.store.port),
                "TORCHELASTIC_USE_AGENT_STORE": "True",
                "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_MAX_RESTARTS": "0",
                STORE_ENV: f"127.0.0.1:{self.store.port}",
                LAUNCHER_ENV: str(os.getpid()),
            }
        )
        if self.nproc > 1:
            env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: N ranks share the cores
        return env

    def start(self, command: Callable[[int], list[str]]) -> None:
        for rank in range(self.nproc):
            self.children.append(
                subprocess.Popen(
                    [sys.executable, "-m", "portal.runtime", *command(rank)],
                    env=self._environment(rank),
                )
            )
        self._forwarder = threading.Thread(
            target=self._forward_events, name="portal-rank-events", daemon=True
        )
        self._forwarder.start()

    def wait_armed(self) -> None:
        """Until every rank runs armed (a resumed one: its part loaded), or one has ended.

        Only then does the launcher open its control socket: the node greets a runtime once
        its checkpoint is loaded (it then removes its decrypted copy), and here that is every
        rank's."""
        keys = [armed_key(rank) for rank in range(self.nproc)]
        while not self.store.check(keys):
            if any(child.poll() is not None for child in self.children):
                return
            time.sleep(_POLL_S)

    def open_control(self) -> None:
        if not self.control:
            return
        try:
            self.channel = ControlChannel(self.control)
        except OSError as exc:
            raise InvalidArgumentError(
                f"cannot listen on the control socket {self.control!r}: {exc.strerror or exc}. "
                "Give --control (or PORTAL_RUNTIME_CONTROL) a path in an existing, writable "
                "directory, at most 107 bytes long"
            ) from exc
        self.channel.start(self)

    def _forward_events(self) -> None:
        """Pass the ranks' events on to the node: the first pending, each problem, one
        abandonment per request (every rank abandons at the same deadline)."""
        from portal.capture.distributed.rank import connect

        store = connect(f"127.0.0.1:{self.store.port}")
        seen = [0] * self.nproc
        while not self._stop.wait(_EVENTS_S):
            for rank in range(self.nproc):
                key = f"{PREFIX}event/{rank}/{seen[rank]}"
                try:
                    if not store.check([key]):
                        continue
                    raw = store.get(key)
                except Exception:
                    continue
                seen[rank] += 1
                try:
                    self._forward(decode_runtime_event(raw), rank)
                except msgspec.DecodeError:
                    continue

    def _forward(self, event: Any, rank: int) -> None:
        if isinstance(event, Paused | Checkpointed):
            return  # the launcher reports the set's own, once it is written
        if isinstance(event, ProbeReport):
            self._probe_report(rank, event)
            return
        if isinstance(event, NotCheckpointed):
            with self._lock:
                if self._not_checkpointed_sent:
                    return
                self._not_checkpointed_sent = True
                self._periodic = None
        if isinstance(event, Pending):
            if self._pending_sent:
                return
            self._pending_sent = True
        if isinstance(event, Abandoned):
            with self._lock:
                if self._abandoned_sent:
                    return
                self._abandoned_sent = True
                self._deadline = None
                self._pending_sent = False
        self._send(event)

    def _probe_report(self, rank: int, report: ProbeReport) -> None:
        """Keep each rank's report; once every rank's is in, send them as one."""
        with self._lock:
            self._probes[rank] = report
            if len(self._probes) < self.nproc:
                return
            reports = [self._probes[r] for r in sorted(self._probes)]
            self._probes.clear()
        self._send(
            ProbeReport(
                problems=[
                    msgspec.structs.replace(p, where=f"rank {r}: {p.where}")
                    for r, one in enumerate(reports)
                    for p in one.problems
                ],
                partial=any(r.partial for r in reports),
                checked_bytes=sum(r.checked_bytes for r in reports),
                where=reports[0].where,
                seconds=max(r.seconds for r in reports),
            )
        )

    # -- the commit -----------------------------------------------------------------------------

    def _outcome_key(self) -> str:
        return f"{PREFIX}outcome/{self._round}"

    def _commit_step(self) -> None:
        """Look at the current round: abort seen (move on), or every part written (write the
        set, then answer go)."""
        outcome = self._outcome_key()
        if self.store.check([outcome]):
            self._round += 1  # answered (an abort: a go is answered below, and moves on there)
            return
        keys = [f"{PREFIX}part/{self._round}/{rank}" for rank in range(self.nproc)]
        if not self.store.check(keys):
            return
        parts = [json.loads(self.store.get(key)) for key in keys]
        entries = [
            PartEntry(
                rank=rank,
                bytes=int(part["bytes"]),
                paused_at=str(part["paused_at"]),
                seconds_to_safe_point=float(part["seconds_to_safe_point"]),
            )
            for rank, part in enumerate(parts)
        ]
        # A pause pending here, or a rank's own (a SIGTERM to it), makes it a pause's set;
        # otherwise it is the periodic checkpoint asked for.
        with self._lock:
            periodic = self._periodic if self._deadline is None else None
        target = periodic or self.checkpoint
        # Written beside the parts, then moved into place: the node's streaming upload, which
        # follows a temporary file next to the checkpoint, sees only a set that is committed.
        pending = self.parts_dir / "set.portal"
        try:
            size, header = write_set(
                [self.part_path(r) for r in range(self.nproc)], entries, pending, round_=self._round
            )
        except Exception as exc:
            with contextlib.suppress(OSError):
                pending.unlink(missing_ok=True)
            why = exc.message if isinstance(exc, PortalError) else f"{type(exc).__name__}: {exc}"
            message = (
                f"writing the checkpoint set {target} failed: {why}. Every rank runs "
                "on, and the pause is tried again while its deadline lasts; the previous "
                "checkpoint stays the job's. Free room (or fix the folder) where it is written"
            )
            self.store.compare_set(outcome, "", f"abort:launcher: {message}")
            if periodic is not None:
                self._forward(NotCheckpointed(reason="error", error=message), 0)
            else:
                self._send(Failed(error=message))
            self._round += 1
            return
        answer = GO_CHECKPOINT if periodic is not None else GO_PAUSE
        if bytes(self.store.compare_set(outcome, "", answer.decode())) != answer:
            with contextlib.suppress(OSError):  # a rank gave up first (its deadline): all run on
                pending.unlink(missing_ok=True)
            self._round += 1
            return
        os.replace(pending, target)
        self._round += 1
        if periodic is not None:
            with self._lock:
                self._periodic = None
            self._send(
                Checkpointed(
                    checkpoint=str(target),
                    bytes=size,
                    stall_seconds=max(0.0, time.time() - header.safe_point_time),
                    where=header.paused_at,
                    seconds_to_safe_point=max(e.seconds_to_safe_point for e in entries),
                    # Every rank is held at its safe point, its output flushed, until the
                    # answer: the output files end where the checkpoint's state does.
                    stdout_bytes=output_file_size(1),
                    stderr_bytes=output_file_size(2),
                )
            )
            return
        self._paused = Paused(
            checkpoint=str(self.checkpoint),
            bytes=size,
            paused_at=header.paused_at,
            seconds_to_safe_point=max(e.seconds_to_safe_point for e in entries),
            seconds_to_write=max(0.0, time.time() - header.safe_point_time),
        )

    # -- the attempt ----------------------------------------------------------------------------

    def _stop_ranks(self) -> None:
        for child in self.children:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.kill()  # not SIGTERM: to a rank that is a pause request
        for child in self.children:
            child.wait()

    def wait(self) -> int:
        """Until every rank has ended: 75 when the set is committed and every rank paused;
        the first failing rank's status when one failed; else 0."""
        idle = 0
        try:
            while True:
                idle += 1
                if self._deadline is not None or idle * _POLL_S >= _EVENTS_S:
                    idle = 0
                    self._commit_step()
                codes = [child.poll() for child in self.children]
                if self._paused is not None:
                    # The set is committed: it holds every rank's part, and each rank was told
                    # to exit 75. One that ends otherwise now (killed on its way out) takes
                    # nothing with it: the job is paused once every rank has ended.
                    self._after_commit(codes)
                    if all(code is not None for code in codes):
                        self._send(self._paused)
                        return EXIT_PAUSED
                    time.sleep(_POLL_S)
                    continue
                failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
                if failed:
                    rank, code = failed[0]
                    with contextlib.suppress(Exception):
                        self.store.compare_set(self._outcome_key(), "", f"abort:rank {rank} ended")
                    self._stop_ranks()
                    print(
                        f"portal: rank {rank} ended with status {code}; the other ranks were "
                        "stopped (their next collective would wait for it for ever)",
                        file=sys.stderr,
                        flush=True,
                    )
                    return int(code or 1)
                if all(code is not None for code in codes):
                    return 0
                time.sleep(_POLL_S)
        finally:
            self._stop.set()
            self._stop_ranks()  # none is left running when the launcher goes, whatever ended it
            if self._forwarder.is_alive():
                self._forwarder.join()

    def _after_commit(self, codes: list[int | None]) -> None:
        """Name, once, each rank that ended with another status than 75 after the set was
        committed (its part is in the set, whole)."""
        for rank, code in enumerate(codes):
            if code not in (None, EXIT_PAUSED) and rank not in self._named_after_commit:
                self._named_after_commit.add(rank)
                print(
                    f"portal: rank {rank} ended with status {code} after the checkpoint set was "
                    "committed; its part is in the set, and the job is paused",
                    file=sys.stderr,
                    flush=True,
                )

    def close(self) -> None:
        self._stop.set()
        self._stop_ranks()
        if self._forwarder.is_alive():
            self._forwarder.join()
        for path in [*self.parts_dir.glob("rank*.portal"), self.parts_dir / "set.portal"]:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.parts_dir.rmdir()
        if self.channel is not None:
            self.channel.close()


def _launch(
    nproc: int,
    checkpoint: str,
    control: str | None,
    grace: float,
    command: Callable[[_Launcher, int], list[str]],
) -> int:
    launcher = _Launcher(nproc, Path(os.path.abspath(checkpoint)), control, grace)
    previous = signal.signal(signal.SIGTERM, launcher._on_sigterm)
    try:
        noticed = _early.take()
        launcher.start(lambda rank: command(launcher, rank))
        if noticed is not None:
            launcher.request_pause(noticed + grace, "sigterm")
        launcher.wait_armed()
        launcher.open_control()
        return launcher.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        launcher.close()


def run_group(
    script: str, args: list[str], *, nproc: int, checkpoint: str, control: str | None, grace: float
) -> int:
    """Start ``nproc`` ranks of ``script`` and wait for them (see module docstring)."""
    return _launch(
        nproc,
        checkpoint,
        control,
        grace,
        lambda launcher, rank: [
            "run",
            "--checkpoint",
            str(launcher.part_path(rank)),
            script,
            *args,
        ],
    )


def resume_group(
    path: str, *, nproc: int, checkpoint: str | None, control: str | None, grace: float
) -> int:
    """Start every rank of the set at ``path`` again, each from its part."""
    manifest = read_manifest(path)
    if nproc not in (0, manifest.world_size):
        raise LauncherError(
            f"checkpoint {path!r} holds {manifest.world_size} ranks, not {nproc}: a job "
            "resumes with as many ranks as it paused with (a different world size is not "
            "supported yet)"
        )
    torch_here = _torch_version()
    if manifest.torch and manifest.torch != torch_here:
        raise RankSetMismatchError(
            f"checkpoint {path!r} was written by ranks running torch {manifest.torch}; this is "
            f"torch {torch_here}. Its process groups, DDP and optimizer states are torch's own "
            f"objects: resume where torch {manifest.torch} is installed",
            details={"checkpoint": manifest.torch, "here": torch_here},
        )
    source = os.path.abspath(path)
    return _launch(
        manifest.world_size,
        checkpoint or path,
        control,
        grace,
        lambda launcher, rank: ["resume", "--checkpoint", str(launcher.part_path(rank)), source],
    )
