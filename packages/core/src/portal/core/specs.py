"""What plugins register, and the interfaces of the objects they make.

Registration hooks return small frozen *spec* objects that carry a ``name`` and a factory; the
plugin manager flattens them, normalises names and refuses duplicates. The factories build the
working objects described by the protocols below (a notice source, a storage backend, ...), so that
registering a plugin costs nothing until Portal actually needs it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import Decision, Job, MachineType, Notice, Offer, str_tuple

__all__ = [
    "AcknowledgesNotices",
    "CaptureExtensionSpec",
    "CatalogSpec",
    "DescribesMachine",
    "KeyStore",
    "NoticeSource",
    "NoticeSourceContext",
    "NoticeSourceSpec",
    "PlacementContext",
    "PlacementPolicy",
    "PlacementPolicySpec",
    "RunningJobPolicy",
    "SerializerSpec",
    "SettingSpec",
    "StateMeasure",
    "StorageBackend",
    "StorageBackendSpec",
    "WaitForSafePoint",
    "normalise_name",
]

_VALID_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")


def normalise_name(name: str) -> str:
    """Plugin names compare case-insensitively with ``-`` and ``_`` alike (``AWS-Spot`` == ``aws_spot``)."""
    return name.strip().lower().replace("-", "_")


def _valid_name(_inst: object, _attr: attrs.Attribute[Any], value: str) -> None:
    if not _VALID_NAME.fullmatch(normalise_name(value)):
        raise ValueError(
            f"plugin name {value!r} is not valid: use letters, digits, '_' or '-' (dots separate "
            "parts), starting with a letter"
        )


# --- notice sources -------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class NoticeSourceContext:
    """What a notice source factory gets: the clock, settings, and the environment to read;
    and ``report``, which says something to the job's events (``portal explain``) from any
    thread: a notice the source saw but cannot read, which it ignores (a node must not die of
    one, nor stay silent about it). Outside a node it logs a warning."""

    clock: Clock = SYSTEM_CLOCK
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    environ: Mapping[str, str] = attrs.field(factory=dict)
    report: Callable[[str], None] = attrs.field(factory=lambda: _log_warning)


def _log_warning(text: str) -> None:
    logging.getLogger("portal.notices").warning("%s", text)


@runtime_checkable
class NoticeSource(Protocol):
    """Watches one platform for preemption notices.

    ``poll`` reports *changes*: each new notice once, and each withdrawal of a notice it reported
    once (the same notice with ``cancelled=True``). When nothing changed it waits up to
    ``timeout_s`` for a change (GCP's hanging GET; or reading its endpoint again meanwhile), then
    returns ``[]``: one that returns at once makes its caller's loop spin. A source never invents a notice and never drops
    one: when its endpoint cannot be read it raises :class:`portal.core.errors.PortalError` with a
    clear message, and the caller keeps polling.
    """

    name: str

    def detect(self) -> bool:
        """Whether this source applies on this machine. Cheap, never hangs, no network unless the
        machine says it is on that platform (or an override points at a test endpoint)."""
        ...

    def poll(self, timeout_s: float) -> Sequence[Notice]:
        """New notices and withdrawals since the previous call."""
        ...

    def close(self) -> None:
        """Release connections and threads. Idempotent."""
        ...


@runtime_checkable
class DescribesMachine(Protocol):
    """Optional capability of a notice source: what machine this is, as its platform says
    (keys ``provider``, ``instance_type``, ``capacity`` (``spot``/``on_demand``/``reserved``),
    ``region``, ``zone``, ``pool``, ``notice_s``...; a value it cannot tell is None). The node
    asks once at start (bounded in time): the purchase model decides the rehearsal and periodic
    checkpoints, and ``notice_s`` the check's warning."""

    def machine_info(self) -> Mapping[str, str | None]: ...


@runtime_checkable
class AcknowledgesNotices(Protocol):
    """Optional capability of a notice source: tell the platform the job is saved, so that the
    event it announced may start now (Azure's ``StartRequests``). The node calls it once the
    checkpoint taken for ``notice`` is stored; a failure is reported, never fatal."""

    def acknowledge(self, notice: Notice) -> None: ...


@attrs.frozen(kw_only=True)
class NoticeSourceSpec:
    """Registers a notice source.

    ``factory`` builds the source from a :class:`NoticeSourceContext`. ``provider`` names the
    platform (``aws``, ``gcp``, ``azure``, ``local``, ``k8s``...).
    """

    name: str = attrs.field(validator=_valid_name)
    provider: str
    factory: Callable[[NoticeSourceContext], NoticeSource]
    description: str = ""


# --- storage backends -------------------------------------------------------------------------


@runtime_checkable
class StorageBackend(Protocol):
    """Stores whole objects by key under one root URL.

    Writes are atomic per object (a reader sees the old object or the new one, never a mix);
    reading a missing key raises :class:`FileNotFoundError`. Keys are ``/``-separated relative paths.
    The checkpoint store (chunking, fingerprints, encryption, manifests) is built on top of this.
    Optionally, ``write_new(key, data)`` writes only where no object is (raising
    :class:`FileExistsError` otherwise: a conditional write): volumes' commits need it.
    """

    url: str

    def write_bytes(self, key: str, data: bytes) -> None: ...

    def read_bytes(self, key: str) -> bytes: ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (recursively), sorted."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key``; a missing key is not an error."""
        ...


@attrs.frozen(kw_only=True)
class StorageBackendSpec:
    """Registers a storage backend for URL schemes (``file``, ``s3``, ``gs``, ``az``...)."""

    name: str = attrs.field(validator=_valid_name)
    schemes: tuple[str, ...] = attrs.field(
        converter=str_tuple, validator=attrs.validators.min_len(1)
    )
    factory: Callable[[str, Mapping[str, Any]], StorageBackend]
    description: str = ""


@runtime_checkable
class KeyStore(Protocol):
    """Holds each job's encryption key, never beside the checkpoints."""

    def create(self, job_id: str) -> bytes:
        """Make and keep a new key for ``job_id``; refuse if it already has one."""
        ...

    def get(self, job_id: str) -> bytes:
        """The job's key; :class:`KeyError` if it has none."""
        ...


# --- serializers and capture extensions ---------------------------------------------------------


class WaitForSafePoint(Exception):
    """Raised by a reducer whose value cannot be carried at this line but will be soon: a tensor
    in an autograd graph that ``backward()`` has not used yet, say. The pause (or the checkpoint
    check) waits for a later safe point instead of reporting the value as one a checkpoint can
    never carry; the message says what it waits for.

    :param ready: optional, cheap, never raising: true once the value could be carried. The engine
        calls it at each later line and tries again as soon as it says so, rather than after its
        usual back-off (a pause is then taken at the first line after ``backward()``).
    """

    def __init__(self, message: str, ready: Callable[[], bool] | None = None) -> None:
        super().__init__(message)
        self.ready = ready


@attrs.frozen(kw_only=True)
class SerializerSpec:
    """Registers pickle reducers for types.

    Keys are fully qualified type names (``"torch.Tensor"``), so registering costs no import: the
    capture engine resolves a key only if its module is already loaded by the program. Each value
    is a reducer returning a ``__reduce__``-style tuple. A reducer that cannot carry a value raises
    (``TypeError`` naming the way out): the value is reported as one a checkpoint cannot carry. One
    that could carry it a few lines later raises :class:`WaitForSafePoint`.
    """

    name: str = attrs.field(validator=_valid_name)
    reducers: Mapping[str, Callable[[Any], Any]] = attrs.field(factory=dict)
    description: str = ""


@attrs.frozen(kw_only=True)
class CaptureExtensionSpec:
    """Registers a capture/restore pair for process-level state (RNGs, settings, cwd...).

    ``capture()`` runs at checkpoint time and returns a picklable value stored in the checkpoint;
    ``restore(value)`` runs at resume before the program continues. ``modules`` lists modules the
    pair needs: it runs only when all of them are loaded by the program (torch support costs nothing
    for a program that never imported torch).
    """

    name: str = attrs.field(validator=_valid_name)
    capture: Callable[[], Any]
    restore: Callable[[Any], None]
    modules: tuple[str, ...] = attrs.field(default=(), converter=str_tuple)
    description: str = ""


# --- placement -----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class StateMeasure:
    """A job's state size, with the name of the figure it came from (events and plans cite it)."""

    bytes: int = attrs.field(validator=attrs.validators.ge(0))
    figure: str  # e.g. "its checkpoint as stored", "its resident and GPU memory now"


def _pools(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


@attrs.frozen(kw_only=True)
class PlacementContext:
    """What a placement policy sees besides the job and the offers."""

    clock: Clock = SYSTEM_CLOCK
    state: StateMeasure | None = None
    excluded_pools: frozenset[str] = attrs.field(factory=frozenset, converter=_pools)
    settings: Mapping[str, Any] = attrs.field(factory=dict)


@runtime_checkable
class PlacementPolicy(Protocol):
    """Judges offers for a job: one :class:`Decision` per offer, with its reason and figures."""

    name: str

    def evaluate(
        self, job: Job, offers: Sequence[Offer], context: PlacementContext
    ) -> list[Decision]: ...


@runtime_checkable
class RunningJobPolicy(Protocol):
    """A policy that also watches a running job (optional capability of a
    :class:`PlacementPolicy`): the node asks it at every checkpoint check, with the offer the job
    runs on in ``context`` (the ``current_offer`` setting) and its latest measure, what to do now.
    It answers ``provision`` then ``move`` to move the job, ``warn`` to keep it where it is with
    a reason, or nothing."""

    name: str

    def watch(
        self, job: Job, offers: Sequence[Offer], context: PlacementContext
    ) -> list[Decision]: ...


@attrs.frozen(kw_only=True)
class PlacementPolicySpec:
    name: str = attrs.field(validator=_valid_name)
    factory: Callable[[Mapping[str, Any]], PlacementPolicy]
    description: str = ""


# --- catalogs -------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class CatalogSpec:
    """Registers a provider's catalog: its machine types, and (optionally) the offers it has now."""

    name: str = attrs.field(validator=_valid_name)
    provider: str
    machine_types: Callable[[], Iterable[MachineType]]
    offers: Callable[[str | None], Iterable[Offer]] | None = None  # region -> offers
    description: str = ""


# --- settings -------------------------------------------------------------------------------------

_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _valid_env(_inst: object, _attr: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and not _ENV_NAME.fullmatch(value):
        raise ValueError(f"environment variable {value!r} is not valid: use A-Z, 0-9 and '_'")


@attrs.frozen(kw_only=True)
class SettingSpec:
    """Declares a setting (``portal_settings``): it joins Portal's one stack of layers (defaults
    < ``PORTAL_HOME/config.toml`` < a project's ``portal.toml`` < a job's values < its ``env``
    variable), is shown by ``portal config show``, set by ``portal config set``, and reaches the
    plugin's notice sources in ``NoticeSourceContext.settings`` under its ``name``.

    ``name`` is dotted by owner (``aws.poll_interval_s`` is ``poll_interval_s`` in an ``[aws]``
    table). ``parse`` turns a raw value (TOML's, or an environment variable's text) into the
    typed one and raises ``ValueError`` saying what is accepted; the default goes through it too
    (``None``, no value, does not). A ``secret`` one (a token) is never printed: not by
    ``portal config show``, not in the refusal of a bad value.
    """

    name: str = attrs.field(validator=_valid_name)
    parse: Callable[[Any], Any]
    default: Any = None
    env: str | None = attrs.field(default=None, validator=_valid_env)
    description: str = ""
    secret: bool = False
