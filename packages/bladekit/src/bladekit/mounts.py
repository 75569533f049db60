"""Mounting volumes at the absolute paths a function names (``volumes={"/ckpt": vol}``).

The local runner has no container filesystem, so a mount path is a real folder on this machine:
the container makes ``/ckpt`` and syncs the volume's committed files into it (portal-storage's
``Volume.mount``), so user code opens ``/ckpt/state.pkl`` unchanged. That needs permission to
create the folder (root, or a writable parent); without it the error says how to fix it.

Because the path is shared by everything on the machine, four guards make it safe:

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

A private mount namespace per container (Linux, CAP_SYS_ADMIN) would isolate paths instead of
serialising them; it is not used because it is unavailable to ordinary users and on macOS.
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

__all__ = ["MountError", "acquire", "release", "state_dir"]

log = logging.getLogger("bladekit.mounts")


class MountError(PortalError):
    """A volume could not be mounted at the path a function names."""

    code = "MOUNT_ERROR"


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
