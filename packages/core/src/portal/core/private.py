"""Folders only this user may enter: where the runtime's control socket and bladekit's mount
records live.

They sit under the temporary folder, which every user shares (a Unix socket's path must be short,
so not under a deep ``PORTAL_HOME``). Creating one with ``exist_ok`` alone would let another user
create it first and own what is inside: bind the socket the node connects to, or write the
records that decide which folder is removed. So an existing folder is used only when it is a
real folder (not a link) owned by this user. One that is merely open to others (a umask, a
``chmod`` by hand) is closed to 0700 and used, unless another user has put something in it
meanwhile: then it is refused, naming what.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from portal.core.errors import UnsafeFolderError

__all__ = ["private_folder"]


def private_folder(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` as a folder of this user's alone: made 0700 when missing, refused (with the
    reason and the way out) when it is a link, another user's, or open to others."""
    folder = Path(path)
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
    except OSError as exc:
        raise UnsafeFolderError(
            f"cannot make {folder} ({what}): {exc.strerror or exc}. Set TMPDIR to a folder this "
            "user can write",
            details={"folder": str(folder)},
        ) from exc
    why = None
    if not stat.S_ISDIR(info.st_mode):
        why = "it is not a folder (a link or a file stands there)"
    elif hasattr(os, "getuid") and info.st_uid != os.getuid():
        why = f"it belongs to user id {info.st_uid}, not to this user ({os.getuid()})"
    elif info.st_mode & 0o077:
        why = _tighten(folder, stat.S_IMODE(info.st_mode))
    if why is not None:
        raise UnsafeFolderError(
            f"{folder} ({what}) cannot be trusted: {why}. Another user could put in it what this "
            f"user's jobs would use. Remove it (rm -r {folder}) if it is yours, or set TMPDIR "
            "to a folder only this user can write",
            details={"folder": str(folder), "reason": why},
        )
    return folder


def _tighten(folder: Path, mode: int) -> str | None:
    """Close this user's own folder that others may enter; None when done, else why it cannot
    be trusted (another user's entry in it, or the change refused)."""
    try:
        for entry in folder.iterdir():
            owner = entry.lstat().st_uid
            if owner != os.getuid():
                return (
                    f"others could enter it (mode {mode:03o}), and user id {owner} put "
                    f"{entry.name} in it"
                )
        os.chmod(folder, 0o700)
    except OSError as exc:
        return f"others may enter it (mode {mode:03o}) and it cannot be closed: {exc.strerror}"
    return None
