"""The checkpoint store: the small API the node calls.

::

    store = CheckpointStore("s3://bucket/portal", key_store)
    with store.open_writer(job_id, expected_bytes=n, deadline=notice.deadline) as w:
        for piece in capture():
            w.write(piece)
        ref = w.commit({"objects": 1234})
    reader = store.open_reader(job_id)            # latest complete, manifest verified
    state = pickle.load(reader.open())            # every chunk verified first
    store.list(job_id); store.latest_complete(job_id); store.gc(job_id)

Everything else (chunking, fingerprints, encryption, layout, retries) stays behind it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import CheckpointRef, CheckpointState
from portal.core.specs import KeyStore, StorageBackend
from portal.storage.backend import LocalBackend, open_backend
from portal.storage.chunking import DEFAULT_CHUNK_SIZE, DEFAULT_PACK_SIZE
from portal.storage.crypto import JobKeys
from portal.storage.errors import (
    CheckpointCorruptError,
    CheckpointIncompleteError,
    CheckpointNotFoundError,
    JobKeyMissingError,
    StorageError,
    WrongKeyError,
)
from portal.storage.format import decode_intent, open_manifest
from portal.storage.gc import GcReport, collect
from portal.storage.keys import refuse_key_beside_checkpoints
from portal.storage.layout import (
    MANIFEST_NAME,
    STARTED_NAME,
    check_id,
    checkpoint_prefix,
    checkpoints_prefix,
    new_checkpoint_id,
)
from portal.storage.manifest import Manifest
from portal.storage.objects import StoredObjects
from portal.storage.progress import Progress
from portal.storage.reader import CheckpointReader
from portal.storage.retry import RetryPolicy
from portal.storage.writer import CheckpointWriter, DeadlinePolicy

if TYPE_CHECKING:
    from portal.core.plugins import Plugins
    from portal.core.settings import Settings

__all__ = ["DEFAULT_INDEPENDENT_EVERY", "CheckpointStore", "open_store"]

#: Every this many checkpoints, one is a full copy (see ``CheckpointStore``'s parameter).
DEFAULT_INDEPENDENT_EVERY = 4


class CheckpointStore:
    """Checkpoints of many jobs under one storage URL, each job encrypted with its own key.

    :param url: ``file://``/plain path, ``memory://``, ``s3://``, ``gs://``, ``az://``/``abfs://``,
        any scheme an installed plugin registers (``portal_storage_backends``); or a ready
        :class:`~portal.core.specs.StorageBackend`.
    :param key_store: where job keys live (:func:`portal.storage.resolve_key_store`).
    :param options: passed to the filesystem (``endpoint_url``, ``token``, ``connection_string``).
    :param parallelism: transfers in flight at once.
    :param chunk_size: bytes per chunk, the unit of dedup (see :mod:`portal.storage.chunking`).
    :param pack_size: bytes of chunks stored together in one object (one request).
    :param retry: back-off for transient errors; its clock is used for waiting only.
    :param clock: wall time for creation times and deadlines, monotonic time for rates.
    :param independent_every: every this many checkpoints one shares no chunk with those before
        it (a full copy), so that one damaged chunk reaches at most this many checkpoints and an
        independent restore point always exists (1: every checkpoint is independent). A
        checkpoint written against a deadline (a notice's) is never made the full copy: uploading
        the whole state could cost the checkpoint itself; the next one without a deadline (a
        periodic one) is.
    """

    def __init__(
        self,
        url: str | StorageBackend,
        key_store: KeyStore,
        *,
        options: Mapping[str, Any] | None = None,
        parallelism: int = 8,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        pack_size: int = DEFAULT_PACK_SIZE,
        retry: RetryPolicy | None = None,
        clock: Clock = SYSTEM_CLOCK,
        independent_every: int = DEFAULT_INDEPENDENT_EVERY,
    ) -> None:
        self.backend: StorageBackend = open_backend(url, options) if isinstance(url, str) else url
        self.url = self.backend.url.rstrip("/")
        self.key_store = key_store
        self.parallelism = max(1, parallelism)
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1 byte, got {chunk_size}")
        self.chunk_size = chunk_size
        if pack_size < 1:
            raise ValueError(f"pack_size must be at least 1 byte, got {pack_size}")
        self.pack_size = pack_size
        if independent_every < 1:
            raise ValueError(
                f"independent_every must be at least 1 checkpoint, got {independent_every}"
            )
        self.independent_every = independent_every
        self.clock = clock
        self.retry = retry or RetryPolicy(clock=clock)
        #: The backend's objects, each call retried: all that writers, readers and gc are given.
        self.objects = StoredObjects(self.backend, self.retry, self.url)
        self._keys: dict[str, JobKeys] = {}
        self._lock = threading.Lock()
        if isinstance(self.backend, LocalBackend):
            refuse_key_beside_checkpoints(key_store, self.backend.root)

    # --- keys -------------------------------------------------------------------------------------

    def create_job_key(self, job_id: str) -> None:
        """Make the job's key (at job creation). Refused if the job already has one."""
        self.key_store.create(check_id(job_id, "job id"))

    def job_keys(self, job_id: str) -> JobKeys:
        check_id(job_id, "job id")
        with self._lock:
            keys = self._keys.get(job_id)
        if keys is None:
            try:
                key = self.key_store.get(job_id)
            except JobKeyMissingError:
                raise
            except KeyError:
                raise JobKeyMissingError(
                    f"the key store has no key for job {job_id}: its checkpoints cannot be "
                    "written or read. Use the key store that created the job",
                    details={"job_id": job_id},
                ) from None
            keys = JobKeys(job_id, key)
            with self._lock:
                self._keys[job_id] = keys
        return keys

    # --- writing ----------------------------------------------------------------------------------

    def open_writer(
        self,
        job_id: str,
        *,
        checkpoint_id: str | None = None,
        expected_bytes: int | None = None,
        deadline: float | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        deadline_policy: DeadlinePolicy = "warn",
        incremental: bool = True,
        max_in_flight: int | None = None,
    ) -> CheckpointWriter:
        """Start a checkpoint of ``job_id``.

        :param expected_bytes: how much the producer will write, if known (for ETA and deadline).
        :param deadline: Unix time by which the checkpoint must be stored (a notice's deadline).
        :param on_progress: called after every chunk (on a transfer thread) with a
            :class:`Progress`.
        :param deadline_policy: ``"warn"`` only sets ``Progress.will_miss_deadline``; ``"raise"``
            also stops the upload with :class:`CheckpointDeadlineError` as soon as the projection
            says it will be late.
        :param incremental: reuse chunks of the newest complete checkpoint (default), unless
            this checkpoint is due to be independent (see ``independent_every``) and has no
            ``deadline``.
        """
        keys = self.job_keys(job_id)
        ckpt = (
            check_id(checkpoint_id, "checkpoint id")
            if checkpoint_id
            else new_checkpoint_id(self.clock)
        )
        existing = self.objects.list(checkpoint_prefix(job_id, ckpt))
        if existing:
            raise StorageError(
                f"checkpoint {ckpt} of job {job_id} already exists in {self.url}; checkpoints are "
                "never overwritten. Leave checkpoint_id unset to get a fresh one",
                details={"job_id": job_id, "checkpoint_id": ckpt},
            )
        parent: Manifest | None = None
        if incremental:
            latest = self.latest_complete(job_id)
            if latest is not None:
                parent = self._read_manifest(keys, latest.checkpoint_id)
                due = self._chain_length(keys, parent) >= self.independent_every
                if due and deadline is None:
                    parent = None  # a full copy: the next independent restore point
        return CheckpointWriter(
            self.objects,
            clock=self.clock,
            job_id=job_id,
            checkpoint_id=ckpt,
            keys=keys,
            parent=parent,
            chunk_size=self.chunk_size,
            pack_size=self.pack_size,
            parallelism=self.parallelism,
            max_in_flight=max_in_flight or 2 * self.parallelism,
            expected_bytes=expected_bytes,
            deadline=deadline,
            on_progress=on_progress,
            deadline_policy=deadline_policy,
        )

    def _chain_length(self, keys: JobKeys, manifest: Manifest) -> int:
        """How many checkpoints share chunks with ``manifest``'s line: it and its parents back
        to the last independent one (whose parent is None). A parent that cannot be read ends
        the line there (gc retired it; what it sealed is still counted by its children)."""
        length = 1
        current = manifest
        while current.parent is not None and length < self.independent_every:
            try:
                current = self._read_manifest(keys, current.parent)
            except StorageError:
                break
            length += 1
        return length

    # --- reading ----------------------------------------------------------------------------------

    def _read_manifest(self, keys: JobKeys, checkpoint_id: str) -> Manifest:
        prefix = checkpoint_prefix(keys.job_id, checkpoint_id)
        try:
            data = self.objects.get(prefix + MANIFEST_NAME)
        except FileNotFoundError:
            if self.objects.list(prefix):
                latest = self.latest_complete(keys.job_id)
                instead = (
                    f"resume from {latest.checkpoint_id}, the latest complete checkpoint"
                    if latest
                    else "the job has no complete checkpoint to resume from"
                )
                raise CheckpointIncompleteError(
                    f"checkpoint {checkpoint_id} of job {keys.job_id} is incomplete: its upload "
                    f"was cut short before the manifest was written. It is not resumable and is "
                    f"kept for inspection; {instead}",
                    details={"job_id": keys.job_id, "checkpoint_id": checkpoint_id},
                ) from None
            raise CheckpointNotFoundError(
                f"job {keys.job_id} has no checkpoint {checkpoint_id} in {self.url}; list the "
                "job's checkpoints to see which exist",
                details={"job_id": keys.job_id, "checkpoint_id": checkpoint_id},
            ) from None
        return open_manifest(keys, data, checkpoint_id=checkpoint_id)

    def open_reader(self, job_id: str, checkpoint_id: str | None = None) -> CheckpointReader:
        """A reader of ``checkpoint_id`` (default: the latest complete one), manifest verified."""
        keys = self.job_keys(job_id)
        if checkpoint_id is None:
            latest = self.latest_complete(job_id)
            if latest is None:
                raise CheckpointNotFoundError(
                    f"job {job_id} has no complete checkpoint in {self.url}; there is nothing to "
                    "resume from (list the job's checkpoints to see incomplete ones)",
                    details={"job_id": job_id},
                )
            checkpoint_id = latest.checkpoint_id
        check_id(checkpoint_id, "checkpoint id")
        manifest = self._read_manifest(keys, checkpoint_id)
        return CheckpointReader(self.objects, keys, manifest, parallelism=self.parallelism)

    # --- listing ----------------------------------------------------------------------------------

    def list(self, job_id: str, *, verify: bool = False) -> list[CheckpointRef]:
        """Every checkpoint of the job, oldest first, as complete, incomplete or corrupt.

        Without ``verify`` a checkpoint is complete when its manifest authenticates; with it, every
        chunk is fetched and verified too (slow: it reads the whole checkpoint).
        """
        keys = self.job_keys(job_id)
        prefix = checkpoints_prefix(job_id)
        found: dict[str, set[str]] = {}
        for key in self.objects.list(prefix):
            rest = key[len(prefix) :]
            if "/" in rest:
                ckpt, name = rest.split("/", 1)
                found.setdefault(ckpt, set()).add(name)
        refs: list[CheckpointRef] = []
        wrong_key: list[WrongKeyError] = []
        for ckpt, names in found.items():
            url = f"{self.url}/{checkpoint_prefix(job_id, ckpt).rstrip('/')}"
            created = self._created_at(job_id, ckpt) if STARTED_NAME in names else None
            if MANIFEST_NAME not in names:
                refs.append(
                    CheckpointRef(
                        job_id=job_id,
                        checkpoint_id=ckpt,
                        url=url,
                        created_at=created or 0.0,
                        size_bytes=0,
                        state=CheckpointState.INCOMPLETE,
                    )
                )
                continue
            state, size = CheckpointState.COMPLETE, 0
            try:
                manifest = self._read_manifest(keys, ckpt)
                created = manifest.created_at
                size = sum(c.stored_size for c in manifest.chunks)
                if verify:
                    CheckpointReader(
                        self.objects, keys, manifest, parallelism=self.parallelism
                    ).verify()
            except WrongKeyError as exc:
                wrong_key.append(exc)
                state = CheckpointState.CORRUPT
            except (CheckpointCorruptError, CheckpointIncompleteError):
                state = CheckpointState.CORRUPT
            refs.append(
                CheckpointRef(
                    job_id=job_id,
                    checkpoint_id=ckpt,
                    url=url,
                    created_at=created or 0.0,
                    size_bytes=size,
                    state=state,
                )
            )
        if wrong_key and len(wrong_key) == sum(
            1 for r in refs if r.state is not CheckpointState.INCOMPLETE
        ):
            raise wrong_key[0]
        refs.sort(key=lambda r: (r.created_at, r.checkpoint_id))
        return refs

    def _created_at(self, job_id: str, checkpoint_id: str) -> float | None:
        try:
            intent = decode_intent(
                self.objects.get(checkpoint_prefix(job_id, checkpoint_id) + STARTED_NAME)
            )
        except FileNotFoundError:
            return None
        return intent.created_at if intent else None

    def latest_complete(self, job_id: str, *, verify: bool = False) -> CheckpointRef | None:
        """The newest checkpoint a job can resume from, or ``None``. Incomplete and corrupt
        checkpoints are never chosen."""
        for ref in reversed(self.list(job_id, verify=verify)):
            if ref.state is CheckpointState.COMPLETE:
                return ref
        return None

    def manifest(self, job_id: str, checkpoint_id: str) -> Manifest:
        """The verified manifest of a complete checkpoint (what it holds: ``summary``)."""
        return self._read_manifest(self.job_keys(job_id), check_id(checkpoint_id, "checkpoint id"))

    # --- garbage collection -------------------------------------------------------------------

    def gc(
        self,
        job_id: str,
        *,
        keep: int | None = None,
        in_flight_grace_s: float = 3600.0,
        drop_incomplete: bool = False,
        dry_run: bool = False,
    ) -> GcReport:
        """Delete chunks no kept checkpoint references (see :func:`portal.storage.gc.collect`)."""
        keys = self.job_keys(job_id)
        return collect(
            self.objects,
            job_id,
            checkpoints=lambda: self.list(job_id),
            manifest=lambda checkpoint_id: self._read_manifest(keys, checkpoint_id),
            clock=self.clock,
            keep=keep,
            in_flight_grace_s=in_flight_grace_s,
            drop_incomplete=drop_incomplete,
            dry_run=dry_run,
        )

    @property
    def local_root(self) -> Path | None:
        return self.backend.root if isinstance(self.backend, LocalBackend) else None

    def __repr__(self) -> str:
        return f"CheckpointStore({self.url!r})"


def open_store(settings: Settings, plugins: Plugins | None = None) -> CheckpointStore:
    """The checkpoint store the settings name: the one door every host opens it through.

    ``settings.storage_url`` is where the checkpoints are; the job keys are in the key store a
    plugin provides (a KMS wins), else under ``settings.home``; ``plugins``: the host's (the
    installed ones when None)."""
    from portal.storage.keys import resolve_key_store

    return CheckpointStore(
        settings.storage_url,
        resolve_key_store(str(settings.home), plugins),
        independent_every=settings.checkpoint_independent_every,
    )
