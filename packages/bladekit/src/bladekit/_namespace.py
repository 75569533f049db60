"""A container's private view of the filesystem: each volume's folder bound at its mount path.

``volumes={"/ckpt": vol}`` must let the function open ``/ckpt/state.pkl`` unchanged, without root
and without creating ``/ckpt`` on this machine. A Linux mount namespace gives the container process
its own mount table; a user namespace (when not already root) gives it the right to change that
table, which the kernel grants to ordinary users (``unshare --user --map-root-user --mount`` is the
same mechanism). Inside, the volume's real folder (``PORTAL_HOME/bladekit/mounts/RUN/ATTEMPT/
volumes/ckpt``) is bind-mounted at ``/ckpt``; nothing changes outside the process and its children,
and the kernel undoes it all when they exit.

A mount needs a folder to mount on. When the mount path does not exist, its deepest existing
ancestor is *shadowed*: a small tmpfs replaces it, holding a bind mount of each of the ancestor's
entries (so everything in it stays visible and writable) and the new folders leading to the mount
point; it is then made read-only. For ``/ckpt`` the ancestor is ``/`` itself, so the tmpfs becomes
the process's new root (``chroot``), as container runtimes (bubblewrap) do.

Limits (see the README): Linux only; the process must still be single-threaded (the kernel refuses
a user namespace to a threaded process, so this runs before any user code); new files directly
inside a shadowed ancestor (e.g. ``/newfile``) cannot be created (read-only); inside, files owned by
other users show as ``nobody`` and set-uid programs (``sudo``) do not gain privileges. Where the
kernel or a sandbox refuses namespaces, :class:`NamespaceUnavailable` says why and the caller falls
back to real folders (``bladekit.mounts``).

Standard library only: imported by the container before anything else.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["NamespaceUnavailable", "enter"]

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_RDONLY = 1
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18


class NamespaceUnavailable(OSError):
    """This machine (kernel, sandbox, platform) does not let this process make a mount namespace."""


class _Libc:
    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._unshare = libc.unshare
        self._unshare.argtypes = [ctypes.c_int]
        self._mount = libc.mount
        self._mount.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_ulong,
            ctypes.c_char_p,
        ]

    def unshare(self, flags: int) -> None:
        if self._unshare(flags) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    def mount(
        self, source: str | None, target: str, fstype: str | None, flags: int, data: str | None
    ) -> None:
        def enc(value: str | None) -> bytes | None:
            return None if value is None else os.fsencode(value)

        if self._mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"mount {source or fstype} on {target}: {os.strerror(code)}")


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _unshare(libc: _Libc) -> None:
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWNS if uid == 0 else _CLONE_NEWNS | _CLONE_NEWUSER
    try:
        libc.unshare(flags)
    except OSError as exc:
        hint = (
            "user namespaces are disabled or blocked here (kernel.unprivileged_userns_clone, "
            "user.max_user_namespaces, an AppArmor/SELinux policy, or a container's seccomp "
            "profile)"
            if exc.errno in (errno.EPERM, errno.ENOSPC, errno.EACCES)
            else "the kernel refused it"
        )
        raise NamespaceUnavailable(
            exc.errno, f"cannot make a private mount namespace: {exc.strerror}; {hint}"
        ) from None
    if uid != 0:
        # Keep this user's own ids inside (files it writes stay its own); only its id is mapped.
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    # Nothing done from here on may reach the machine's own mount table.
    libc.mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)


def _existing_ancestor(path: str) -> tuple[str, list[str]]:
    """The deepest existing folder above ``path`` (symbolic links resolved) and the names below."""
    missing: list[str] = []
    current = path
    while not os.path.lexists(current):
        current, name = os.path.split(current)
        missing.insert(0, name)
    return os.path.realpath(current), missing


def _populate(libc: _Libc, target: str, source: str) -> None:
    """Make ``target`` (an empty tmpfs) show every entry of the folder ``source``."""
    for name in os.listdir(source):
        real, placeholder = os.path.join(source, name), os.path.join(target, name)
        try:
            info = os.lstat(real)
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(real), placeholder)
                continue
            if stat.S_ISDIR(info.st_mode):
                os.mkdir(placeholder)
            else:
                Path(placeholder).touch()
            libc.mount(real, placeholder, None, _MS_BIND | _MS_REC, None)
        except OSError as exc:  # one entry this user cannot see stays hidden; say so, go on
            print(f"bladekit container: {real} hidden inside the container: {exc}", file=sys.stderr)


def _shadow(
    libc: _Libc, folder: str, binds: Iterable[tuple[list[str], str]], *, new_root: str | None
) -> None:
    """Replace ``folder`` by a tmpfs showing its entries, plus each bind's new folders and mount.

    ``new_root`` (used when ``folder`` is ``/``): build the tmpfs there and ``chroot`` into it.
    """
    if new_root is None:
        # The folder's own entries, reached through a descriptor once the tmpfs hides the path.
        keep = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        source, target = f"/proc/self/fd/{keep}", folder
    else:
        keep, source, target = -1, folder, new_root
    try:
        libc.mount("tmpfs", target, "tmpfs", 0, "mode=0755")
        _populate(libc, target, source)
        for names, host in binds:
            point = os.path.join(target, *names)
            os.makedirs(point)
            libc.mount(host, point, None, _MS_BIND | _MS_REC, None)
        libc.mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)
    finally:
        if keep >= 0:
            os.close(keep)
    if new_root is not None:
        cwd = os.getcwd()
        os.chroot(new_root)
        try:
            os.chdir(cwd)
        except OSError:
            os.chdir("/")


def enter(binds: Sequence[tuple[str, Path]], *, scratch: Path) -> None:
    """Give this process a private mount table where each ``(mount path, host folder)`` of
    ``binds`` shows the host folder at the mount path.

    ``scratch`` is an empty folder of this user's for the new root, when one is needed. Raises
    :class:`NamespaceUnavailable` (with the reason) when namespaces cannot be used here, before
    anything changed; any other ``OSError`` means setting up the view failed midway.
    """
    if not sys.platform.startswith("linux"):
        raise NamespaceUnavailable(
            errno.ENOSYS, f"mount namespaces are Linux-only ({sys.platform})"
        )
    threads = _threads()
    if threads > 1:
        raise NamespaceUnavailable(
            errno.EINVAL,
            f"the container process already runs {threads} threads, and the kernel gives a "
            "private namespace to single-threaded processes only",
        )
    try:
        libc = _Libc()
    except (OSError, AttributeError) as exc:
        raise NamespaceUnavailable(errno.ENOSYS, f"cannot reach libc: {exc}") from None
    for _path, host in binds:
        host.mkdir(parents=True, exist_ok=True)
    _unshare(libc)
    direct: list[tuple[str, str]] = []
    shadowed: dict[str, list[tuple[list[str], str]]] = {}
    for path, host in binds:
        ancestor, missing = _existing_ancestor(os.path.normpath(path))
        if not missing:
            if not os.path.isdir(ancestor):
                raise NotADirectoryError(
                    errno.ENOTDIR, f"mount path {path} exists and is not a folder"
                )
            direct.append((ancestor, str(host)))
        else:
            shadowed.setdefault(ancestor, []).append((missing, str(host)))
    # The root first (everything else is then looked up inside the new root), then shallow
    # before deep, so a deeper shadow is built on the view a shallower one made.
    root_binds = shadowed.pop("/", None)
    if root_binds is not None:
        scratch.mkdir(parents=True, exist_ok=True)
        _shadow(libc, "/", root_binds, new_root=str(scratch))
    for folder in sorted(shadowed, key=lambda p: p.count("/")):
        _shadow(libc, folder, shadowed[folder], new_root=None)
    for point, folder_on_host in direct:
        libc.mount(folder_on_host, point, None, _MS_BIND | _MS_REC, None)
