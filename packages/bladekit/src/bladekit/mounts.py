"""Mounting volumes at the absolute paths a function names (``volumes={"/ckpt": vol}``).

Two ways, chosen per container by :func:`mode` (``BLADEKIT_MOUNTS``: ``auto``, the default,
``namespace`` or ``direct``):

- **namespace** (Linux; no root needed): each attempt gets its own folder per mount,
  :func:`host_folder` (``PORTAL_HOME/bladekit/mounts/RUN/ATTEMPT/volumes/ckpt``), which
  :mod:`bladekit._namespace` shows at ``/ckpt`` in the container's private mount table. Nothing
  is created at ``/ckpt`` on the machine; two containers may use the same mount path at once; the
  runner removes :func:`attempt_dir` when the attempt ends. A folder already at ``/ckpt`` on the
  machine is hidden inside the container, never touched.
- **direct** (the fallback where namespaces are unavailable, e.g. macOS or a sandbox that blocks
  them): a mount path is a real folder on this machine, which needs permission to create it
  (root, or a writable parent); without it the error says how to fix it, and why the namespace
  way was not used.

In both, the container syncs the volume's committed files into the mount (portal-storage's
``Volume.mount``), so user code opens ``/ckpt/state.pkl`` unchanged.

In direct mode the path is shared by everything on the machine, so four guards make it safe:

- :func:`state_dir` is this user's alone (made 0700, refused when another user made it first
  or it is open to others), since its records decide which folders are removed;
- a lock per path (``flock`` on a file in :func:`state_dir`), held by the container process for
  its whole life and released by the kernel however it dies: two containers never share a mount
  path; the second waits for the first;
- an owner record next to the lock: a folder that already exists and holds files is only ever
  synced over (which deletes files the volume lacks) when bladekit mounted it before; any other
  non-empty folder is refused, never emptied;
- after each attempt the runner removes what the attempt mounted (:func:`release`), so the next
  attempt, like a fresh machine, sees exactly the volume's last commit and nothing uncommitted.

In namespace mode none of them is needed: the folder is the attempt's own, made empty by bladekit.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from portal.core.errors import PortalError
from portal.core.private import private_folder

__all__ = [
    "MOUNT_MODES",
    "MOUNT_MODE_ENV",
    "MountError",
    "acquire",
    "attempt_dir",
    "host_folder",
    "mode",
    "release",
    "state_dir",
]

log = logging.getLogger("bladekit.mounts")

#: Environment variable choosing how containers mount volumes (see :func:`mode`).
MOUNT_MODE_ENV = "BLADEKIT_MOUNTS"
MOUNT_MODES = ("auto", "namespace", "direct")


class MountError(PortalError):
    """A volume could not be mounted at the path a function names."""

    code = "MOUNT_ERROR"


def mode() -> str:
    """``auto`` (namespace, else direct), ``namespace`` (only) or ``direct`` (only)."""
    value = os.environ.get(MOUNT_MODE_ENV, "auto").strip().lower() or "auto"
    if value not in MOUNT_MODES:
        raise MountError(
            f"{MOUNT_MODE_ENV}={value!r} is not valid: use auto (the default), namespace or direct",
            details={"variable": MOUNT_MODE_ENV, "value": value},
        )
    return value


def attempt_dir(run_dir: Path, attempt: int) -> Path:
    """Where attempt ``attempt`` of the run in ``run_dir`` keeps its namespace mounts."""
    return run_dir.parent.parent / "mounts" / run_dir.name / str(attempt)


def host_folder(run_dir: Path, attempt: int, path: str) -> Path:
    """The real folder shown at mount path ``path`` inside that attempt's container."""
    return attempt_dir(run_dir, attempt) / "volumes" / path.lstrip("/")


def state_dir() -> Path:
    """Locks and owner records for mount paths: machine-wide (per user), like the paths."""
    return private_folder(
        Path(tempfile.gettempdir()) / f"bladekit-mounts-{os.getuid()}", "bladekit's mount records"
    )


def _slot(path: str) -> Path:
    return state_dir() / hashlib.sha256(path.encode()).hexdigest()[:24]


def acquire(
    path: str,
    volume_name: str,
    *,
    wait_s: float = 600.0,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Lock ``path`` for this process and make it an empty-or-ours folder; returns the lock fd.

    Keep the fd open for as long as the mount is used: closing it (or dying) releases the path.
    """
    slot = _slot(path)
    fd = os.open(slot.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    waited = 0.0
    logged = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if waited >= wait_s:
                os.close(fd)
                raise MountError(
                    f"mount path {path} for volume {volume_name!r} stayed in use by another "
                    f"container for {wait_s:.0f} s: wait for that run to end, or mount this "
                    "volume at another path",
                    details={"path": path, "volume": volume_name},
                ) from None
            if not logged:
                log.info("waiting for mount path %s (in use by another container)", path)
                logged = True
            sleep(0.1)
            waited += 0.1
    try:
        _prepare(path, volume_name, slot)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _prepare(path: str, volume_name: str, slot: Path) -> None:
    target = Path(path)
    record = _read_record(slot)
    created = False
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise MountError(
            f"cannot mount volume {volume_name!r} at {path}: that path exists and is not a "
            "folder. Remove it, or mount the volume at another path",
            details={"path": path, "volume": volume_name},
        )
    if target.is_dir():
        if any(target.iterdir()) and record is None:
            raise MountError(
                f"cannot mount volume {volume_name!r} at {path}: the folder exists and holds "
                "files bladekit did not put there, and mounting would replace them. Empty or "
                "move the folder, or mount the volume at another path",
                details={"path": path, "volume": volume_name},
            )
        created = bool(record and record.get("created"))
    else:
        try:
            target.mkdir(parents=True)
        except OSError as exc:
            raise MountError(
                f"cannot create mount path {path} for volume {volume_name!r}: {exc.strerror}. "
                f"Create it once yourself (e.g. sudo mkdir -p {path} && sudo chown $USER {path}), "
                "run as a user who may, or mount the volume under a writable folder",
                details={"path": path, "volume": volume_name},
            ) from exc
        created = True
    _write_record(
        slot, {"path": path, "volume": volume_name, "pid": os.getpid(), "created": created}
    )


def release(path: str, pid: int) -> bool:
    """Remove what container ``pid`` mounted at ``path``, once it has exited; True if removed.

    Skipped when another container holds the path now, or the record names another process.
    """
    slot = _slot(path)
    try:
        fd = os.open(slot.with_suffix(".lock"), os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        record = _read_record(slot)
        if record is None or record.get("pid") != pid:
            return False
        target = Path(path)
        if record.get("created"):
            shutil.rmtree(target, ignore_errors=True)
        elif target.is_dir():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        slot.with_suffix(".json").unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)


def _read_record(slot: Path) -> dict[str, Any] | None:
    with contextlib.suppress(FileNotFoundError, ValueError):
        data = json.loads(slot.with_suffix(".json").read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return data
    return None


def _write_record(slot: Path, record: dict[str, Any]) -> None:
    tmp = slot.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, slot.with_suffix(".json"))
