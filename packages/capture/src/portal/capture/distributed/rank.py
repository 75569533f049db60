"""One rank of a multi-process job, as Portal's engine sees it: where requests come from, how
it agrees on a pause with its peers, and how its part is committed with theirs.

The launcher (``python -m portal.runtime run --nproc-per-node N``, see
:mod:`portal.runtime.group`) starts every rank with torchrun's environment (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``...) plus :data:`STORE_ENV`, the address of the
store it hosts. Through that store (``torch.distributed.TCPStore``, the rendezvous's own, under
the ``portal/`` prefix):

- **requests**: the launcher writes ``request/N`` (a pause with its deadline, a cancel, a
  periodic checkpoint, a check); a thread of each rank looks for the next one every 50 ms (one
  store lookup on loopback: all a rank costs while nothing is pending) and hands it to the
  engine;
- **the ballot** (:mod:`.ballot`): while a pause is pending, a thread publishes the rank's issued
  collectives (:mod:`.counts`); at each safe point the engine asks :meth:`RankSession.agree`;
- **the drain**: once agreed, a barrier on every group the rank is in, in the order the groups
  were made (symmetric: every rank agreed), then a CUDA synchronize when CUDA is in use;
- **the commit**: each rank writes its part and says so (``part/R/rank``); the launcher, once
  every part is there, writes the set and answers ``outcome/R = go``; a rank whose capture
  failed, or whose deadline passed, answers ``abort`` instead. The outcome is one
  compare-and-set: the first answer wins, so no rank exits 75 while another runs on;
- **events**: what a rank's engine reports goes to ``event/rank/N``; the launcher passes them
  on to the node.

``R`` counts the rounds: a decided round that aborted is over for every rank (each was in it),
so each moves to a fresh ballot.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Final

import msgspec

from portal.capture.distributed import groups as group_log
from portal.capture.distributed.ballot import NOT_MEMBER, Ballot, Count, agree
from portal.capture.distributed.ddp import DistributedUnsupportedError
from portal.capture.distributed.record import RankRecord
from portal.capture.unseen import UnseenThread
from portal.core.specs import CaptureExtensionSpec

__all__ = [
    "GO_CHECKPOINT",
    "GO_PAUSE",
    "LAUNCHER_ENV",
    "PREFIX",
    "STORE_ENV",
    "RankSession",
    "armed_key",
    "connect",
    "distributed_reducers",
    "request_key",
    "torch_distributed",
]

#: ``HOST:PORT`` of the launcher's store; set only in the ranks Portal launches.
STORE_ENV: Final = "PORTAL_GROUP_STORE"
#: The launcher's pid, in each rank it starts.
LAUNCHER_ENV: Final = "PORTAL_GROUP_LAUNCHER"
#: Every key of Portal's own in the launcher's store starts with this.
PREFIX: Final = "portal/"
#: Where the ranks publish their issued counts, one place for every round.
_ISSUED: Final = f"{PREFIX}issued"
_PUBLISH_S: Final = 0.001
#: How often a rank looks for a request: what it costs while nothing is pending (one store
#: lookup on loopback), and what it adds to a pause's latency at most.
_WATCH_S: Final = 0.05
_COMMIT_POLL_S: Final = 0.002


def torch_distributed() -> Any:
    """``torch.distributed``, imported. torch is the job's own, never a dependency of Portal's
    (a plain requirement would pull a CUDA build onto a CPU machine): a program Portal launches
    as ranks is a torch.distributed program, so it has torch; elsewhere this is never called."""
    return importlib.import_module("torch.distributed")


def request_key(n: int) -> str:
    return f"{PREFIX}request/{n}"


def armed_key(rank: int) -> str:
    """Set once the rank runs armed (for a resume: its state loaded)."""
    return f"{PREFIX}armed/{rank}"


def connect(address: str, *, timeout_s: float = 60.0) -> Any:
    """A client of the launcher's store at ``HOST:PORT``."""
    dist = torch_distributed()
    host, _, port = address.rpartition(":")
    return dist.TCPStore(
        host,
        int(port),
        is_master=False,
        timeout=timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )


def distributed_reducers() -> dict[str, Callable[[Any], Any]]:
    """The reducers a rank's checkpoint needs for torch.distributed objects, by type name."""
    from portal.capture.distributed import ddp, objects, refused

    return {
        **refused.refused_reducers(),
        "torch.nn.parallel.distributed.DistributedDataParallel": ddp.reduce_ddp,
        "torch.distributed.distributed_c10d.ProcessGroup": group_log.reduce_group,
        "torch._C._distributed_c10d.ProcessGroup": group_log.reduce_group,
        "torch._C._distributed_c10d.Work": objects.reduce_work,
        "torch.distributed.distributed_c10d.Store": objects.reduce_store,
        "torch._C._distributed_c10d.TCPStore": objects.reduce_tcp_store,
    }


_encode = msgspec.json.Encoder().encode
#: The launcher's answers to a round whose set it wrote: the ranks exit 75, or run on.
GO_PAUSE: Final = b"go:pause"
GO_CHECKPOINT: Final = b"go:checkpoint"
#: The capture extension that carries the working directory's files (rank 0's part only).
_WORKDIR_EXTENSION: Final = "workdir_files"
_WORKDIR_RESTORED: Final = f"{PREFIX}workdir-restored"


class _Init:
    """``init_process_group``'s arguments as the program gave them (replayed at resume)."""

    backend: str | None = None
    timeout_s: float | None = None


def _record_init() -> _Init:
    """Wrap ``torch.distributed.init_process_group`` to note its backend and timeout."""
    dist = torch_distributed()

    seen = _Init()
    original = dist.init_process_group

    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("pg_options") is not None:
            raise DistributedUnsupportedError(
                "init_process_group(pg_options=...) holds backend objects Portal cannot make "
                "again at resume; call it without pg_options, or checkpoint in your own code "
                "with torch.distributed.checkpoint"
            )
        timeout = kwargs.get("timeout", args[1] if len(args) > 1 else None)
        seen.backend = None if backend is None else str(backend)
        seen.timeout_s = None if timeout is None else timeout.total_seconds()
        return original(backend, *args, **kwargs)

    init_process_group.__wrapped__ = original  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group
    return seen


class RankSession:
    """This process as rank ``rank`` of ``world_size``, talking to the launcher's ``store``.

    :param resumed: the record of the part this rank resumed from (its groups are made again
        by :meth:`replay` before the state loads), or None for a fresh start.
    """

    def __init__(
        self,
        store: Any,
        rank: int,
        world_size: int,
        *,
        address: str | None = None,
        resumed: RankRecord | None = None,
    ) -> None:
        torch_distributed()  # torch, imported (the job's own)
        self.store = store
        self.address = address  # where its threads connect, each with a connection of its own
        #: Where this rank writes its part (the engine's checkpoint path, set by the runtime).
        self.part_path = ""
        self._threads: list[UnseenThread] = []
        self.rank = rank
        self.world_size = world_size
        self._torch = sys.modules["torch"]
        self._round = 0
        self._events = 0
        self._engine: Any = None
        self._pending = threading.Event()
        self._stop = threading.Event()
        self._init = _record_init()
        group_log.record()
        if resumed is not None:
            self._init.backend, self._init.timeout_s = resumed.backend, resumed.timeout_s

    # -- resume --------------------------------------------------------------------------------

    def replay(self, record: RankRecord) -> None:
        """Make the default group and every logged group again, as the program made them,
        on this attempt's rendezvous (``env://``: the launcher's store)."""
        if (record.rank, record.world_size) != (self.rank, self.world_size):
            raise DistributedUnsupportedError(
                f"this part is rank {record.rank} of {record.world_size}, but the process "
                f"runs as rank {self.rank} of {self.world_size}: resume the job's whole "
                "checkpoint set with `portal resume JOB`, which starts every rank"
            )
        log = group_log.GroupLog(calls=list(record.groups))
        group_log.replay(log, backend=record.backend, timeout_s=record.timeout_s)

    def share_workdir(self, extensions: Sequence[Any]) -> list[Any]:
        """The capture extensions of this rank, the working directory's carried once.

        Every rank runs in the one working directory, and at the agreed cut they all see it
        alike: rank 0's part carries its files, the others' carry none (W copies would cost W
        times the room, and W ranks restoring the same files would race). At resume the other
        ranks wait, before anything of theirs that reads a file (an open file reopened, the
        program's next line), until rank 0 has put the files back."""
        shared = []
        for ext in extensions:
            if ext.name != _WORKDIR_EXTENSION:
                shared.append(ext)
            elif self.rank == 0:
                shared.append(
                    CaptureExtensionSpec(
                        name=ext.name, capture=ext.capture, restore=self._restored_by(ext.restore)
                    )
                )
            else:
                shared.append(
                    CaptureExtensionSpec(
                        name=ext.name, capture=lambda: None, restore=self._wait_for_workdir
                    )
                )
        return shared

    def _restored_by(self, restore: Callable[[Any], None]) -> Callable[[Any], None]:
        def restore_then_say(state: Any) -> None:
            restore(state)
            self.store.set(_WORKDIR_RESTORED, "1")

        return restore_then_say

    def _wait_for_workdir(self, state: Any) -> None:
        while not self.store.check([_WORKDIR_RESTORED]):
            time.sleep(_COMMIT_POLL_S)

    # -- requests --------------------------------------------------------------------------------

    def start(self, engine: Any) -> None:
        """Hand the launcher's requests to ``engine``; publish counts while a pause is due."""
        self._engine = engine
        # Threads the program does not see among its own (:mod:`portal.capture.unseen`).
        self._threads.extend(UnseenThread(target) for target in (self._watch, self._publish))
        self.store.set(armed_key(self.rank), "1")  # the launcher answers the node from now on

    def _watch(self) -> None:
        # Its own connection: the main thread's ballot calls never queue behind this one's.
        store = connect(self.address) if self.address else self.store
        n = 0
        while not self._stop.wait(_WATCH_S):
            key = request_key(n)
            try:
                if not store.check([key]):
                    continue
                request = json.loads(store.get(key))
            except Exception:  # the launcher is going away: so is this rank
                continue
            n += 1
            if request["op"] == "pause":
                self._pending.set()
                self._engine.request_pause(
                    float(request["deadline"]), request.get("source", "node")
                )
            elif request["op"] == "cancel":
                self._engine.cancel(request.get("reason", "cancelled"))
            elif request["op"] == "checkpoint":  # periodic: the launcher writes the set
                self._pending.set()
                self._engine.request_checkpoint(self.part_path, request.get("deadline"))
            elif request["op"] == "probe":
                self._engine.request_probe(request.get("deadline"))

    def _publish(self) -> None:
        """While a pause is due (asked by the launcher, or a SIGTERM to this rank), publish
        this rank's issued counts for its peers' ballot."""
        store = connect(self.address) if self.address else self.store
        ballot = Ballot(store, self.world_size, issued_key=_ISSUED)
        while not self._stop.is_set():
            if not self._engine.wanted():
                self._pending.wait(_WATCH_S)
                self._pending.clear()
                continue
            with contextlib.suppress(Exception):
                ballot.publish_issued(self.rank, self.counts())
            time.sleep(_PUBLISH_S)

    def close(self) -> None:
        """Stop the session's threads (the script has ended): none is inside a store call
        when the process goes."""
        self._stop.set()
        self._pending.set()
        for thread in self._threads:
            thread.join()

    # -- the pause -------------------------------------------------------------------------------

    def _groups(self) -> list[Any]:
        """Every group of the log, the default first (None where this rank is not a member)."""
        made = [group_log.default_group()]
        by_index = {index: group for group, index in group_log._LOG.groups.items()}
        made.extend(by_index.get(i) for i in range(len(group_log._LOG.calls)))
        return made

    def counts(self) -> Count:
        """This rank's issued collectives per group (:data:`NOT_MEMBER` outside a group)."""
        return tuple(
            NOT_MEMBER if group is None else int(group._get_sequence_number_for_group())
            for group in self._groups()
        )

    def _ballot(self) -> Ballot:
        ballot = Ballot(
            self.store, self.world_size, key=f"{PREFIX}ballot/{self._round}", issued_key=_ISSUED
        )
        ballot.open()
        return ballot

    def ready(self) -> bool:
        """Whether the program can agree at all: its default group exists."""
        dist = self._torch.distributed
        return bool(dist.is_available() and dist.is_initialized())

    def agree(self, deadline: float) -> bool:
        """At a safe point with nothing in flight: True when every rank agreed to pause here
        (the caller then drains, captures and commits), False to run on."""
        if not self.ready():
            return False
        count = self.counts()
        ballot = self._ballot()
        ballot.publish_issued(self.rank, count)
        return agree(ballot, self.rank, count, deadline=deadline, clock=time.time) == "pause"

    def drain(self) -> None:
        """A barrier on each group this rank is in, in order (every rank agreed: each does the
        same), then the GPU's queued work."""
        dist = self._torch.distributed
        for group in self._groups():
            if group is not None:
                dist.barrier(group=group)
        cuda = sys.modules.get("torch.cuda")
        if cuda is not None and cuda.is_initialized():
            cuda.synchronize()

    def record(self) -> RankRecord:
        """What the part's header says about this rank (read back before its state loads)."""
        return RankRecord(
            rank=self.rank,
            world_size=self.world_size,
            backend=self._init.backend or self._torch.distributed.get_backend(),
            timeout_s=self._init.timeout_s,
            groups=list(group_log._LOG.calls),
            counts=list(self.counts()),
            torch=str(self._torch.__version__),
        )

    def _outcome_key(self) -> str:
        return f"{PREFIX}outcome/{self._round}"

    def abort(self, reason: str) -> None:
        """This rank cannot commit its part this round: every rank runs on."""
        self.store.compare_set(self._outcome_key(), "", f"abort:rank {self.rank}: {reason}")
        self._round += 1

    def commit(self, part: dict[str, Any], deadline: float) -> str:
        """Say this rank's part is written (``part``: its path, size and where it paused) and
        wait for the round's outcome, as the launcher answers it: ``"pause"`` (the set is
        written: exit 75), ``"checkpoint"`` (a periodic set is written: run on), or
        ``"abort"`` (no set: run on)."""
        self.store.set(f"{PREFIX}part/{self._round}/{self.rank}", json.dumps(part))
        key = self._outcome_key()
        while not self.store.check([key]):
            if time.time() >= deadline:
                self.store.compare_set(key, "", f"abort:rank {self.rank}: deadline")
                break
            time.sleep(_COMMIT_POLL_S)
        outcome = bytes(self.store.get(key))
        self._round += 1
        return {GO_PAUSE: "pause", GO_CHECKPOINT: "checkpoint"}.get(outcome, "abort")

    # -- events ----------------------------------------------------------------------------------

    def forward(self, event: Any) -> None:
        """Pass one of the engine's events on to the launcher (it reports to the node)."""
        with contextlib.suppress(Exception):
            self.store.set(f"{PREFIX}event/{self.rank}/{self._events}", _encode(event))
            self._events += 1


def _die_with_launcher() -> None:
    """Be killed when the launcher dies (kill -9, its machine's node gone): a rank whose
    launcher is gone would train on unsupervised, its store unreachable, its pause impossible."""
    launcher = os.environ.get(LAUNCHER_ENV)
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if launcher and os.getppid() != int(launcher):  # it died before the line above
        os._exit(1)


def from_environment(resumed: RankRecord | None = None) -> RankSession | None:
    """The rank session of a process Portal's launcher started, else None."""
    address = os.environ.get(STORE_ENV)
    if not address:
        return None
    _die_with_launcher()
    return RankSession(
        connect(address),
        int(os.environ["RANK"]),
        int(os.environ["WORLD_SIZE"]),
        address=address,
        resumed=resumed,
    )
