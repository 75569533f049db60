"""The files of the job's working directory, carried with the checkpoint.

A resumed job may run on a new machine whose working directory is empty: what the program wrote
there (a log it appends to, a results file, a cache it reads back) must be there again before
it continues. The spec lists "the files in the working directory" in what a checkpoint holds and
"files outside the working directory" in what it does not.

* **The job's working directory** is the directory the runtime started in (the node starts a
  job in its working directory), in each process: a resumed process restores the files into
  *its* working directory, which on a new machine need not have the old one's path. A program
  that had changed into a subdirectory is put back into the same subdirectory there, and
  :func:`relocate` maps other extensions' paths (a log file's) the same way. The engine used
  in-process, outside the runtime, carries no files.
* **What travels**: regular files (contents, permission bits, modification time), directories,
  and symbolic links whose target stays inside the directory (recorded relative, so they point
  at the same file in the new place). A link that leads outside is a file outside the working
  directory: not carried, and said so. Sockets, FIFOs and devices belong to this machine.
  ``.portalignore`` at the top of the directory (gitignore syntax, read with ``pathspec``, the
  library git-compatible tools use) leaves out what need not travel. Always left out: Portal's
  own checkpoints (``*.portal``), bytecode and tool caches, and virtual environments (a directory
  holding ``pyvenv.cfg``): installed packages are installed again on the new machine, as the
  spec says. A ``!`` line in ``.portalignore`` brings back a cache (not a virtual environment).
  Never carried, nor written by a restore: Portal's own home (``PORTAL_HOME``) and a local
  checkpoint store when they lie inside the directory (a project-local home): a resume must not
  roll back the job's own records, attempts and notices with the program's files.
* **Size**: files of 64 KiB or more travel as out-of-band buffers, mapped rather than read, so
  the checkpoint file holds their bytes as they are and the store's deduplication makes an
  unchanged file cost nothing. When the directory holds more than :data:`WARN_BYTES` (1 GiB),
  the first checkpoint or check of each process prints a note naming the total, the biggest
  files and ``.portalignore``.
* **Restoring is checked**: every entry is checked before anything is written; an entry that
  would write outside the directory (an absolute path, ``..``, a link or an existing directory
  link that leads out) is refused with :class:`UnsafeWorkdirEntryError` naming it, and the
  resume stops. A file already there with the same size and modification time is left as is,
  and so is a changed file that a process holds open (the resumed runtime's own redirected
  output, say): rolling it back would replace it under that process's writes. The restore says
  which it left, in a note that reaches the job's events.
"""

from __future__ import annotations

import contextlib
import gc
import io
import mmap
import os
import pickle
import posixpath
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Final, Literal, NamedTuple

import pathspec

from portal.capture.notes import note_on_restore
from portal.core import units
from portal.core.errors import CapturePortalError
from portal.core.specs import CaptureExtensionSpec

__all__ = [
    "IGNORE_FILE",
    "WARN_BYTES",
    "UnsafeWorkdirEntryError",
    "WhyNotCarried",
    "WorkdirEntry",
    "WorkdirFiles",
    "WorkdirReport",
    "WorkdirState",
    "flush_open_files",
    "job_root",
    "portal_folders",
    "relocate",
    "set_job_root",
    "specs",
    "why_not_carried",
]

IGNORE_FILE: Final = ".portalignore"
#: Always left out: Portal's own checkpoints (a checkpoint must not carry the previous one) and
#: bytecode caches (rebuilt on import).
ALWAYS_IGNORED: Final = (
    "*.portal",
    ".*.portal.*.tmp",
    ".portal-restore-*",
    "__pycache__/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
)
#: A working directory larger than this gets a note at its first checkpoint or check.
WARN_BYTES: Final = 1 << 30
#: For tests: the note's threshold in bytes (internal, like the check's budget variable).
WARN_BYTES_ENV: Final = "PORTAL_CAPTURE_WORKDIR_WARN_BYTES"
#: Files at least this large travel out of band (mapped, deduplicated by the store).
OUT_OF_BAND_BYTES: Final = 64 * 1024
_BIGGEST_SHOWN: Final = 3

_ROOT: list[str] = []  # runtime singleton: the directory the runtime started in
_MOVED: list[tuple[str, str]] = []  # runtime singleton: (old root, new root) once restored


def set_job_root(path: str) -> None:
    """Called by ``portal.runtime`` before anything changes the directory."""
    _ROOT[:] = [os.path.abspath(path)]


def job_root() -> str:
    """The job's working directory in this process (default: the current directory)."""
    return _ROOT[0] if _ROOT else os.getcwd()


def relocate(path: str) -> str:
    """``path`` as it is in this process: a path inside the working directory the checkpoint was
    taken in is mapped into this process's working directory (a resume on a new machine), any
    other path is returned as is. For extensions restored after the files (a log file's path)."""
    if not _MOVED:
        return path
    old, new = _MOVED[0]
    rel = os.path.relpath(os.path.abspath(path), old)
    if rel == "." or _inside(rel.replace(os.sep, "/")):
        return os.path.normpath(os.path.join(new, rel))
    return path


#: Why a file does not travel with the working directory (see :func:`why_not_carried`).
WhyNotCarried = Literal["no job", "root is /", "outside", "left out"]


def why_not_carried(path: str) -> WhyNotCarried | None:
    """Why the file at ``path`` (absolute) would not travel with the working directory's files,
    or None when a checkpoint taken now carries it: it is under the job's working directory, by
    its path as written and by the path its links resolve to, and neither :data:`ALWAYS_IGNORED`,
    ``.portalignore`` nor a virtual environment leaves it (or a directory above it) out, exactly
    as :func:`scan` would decide. For the program's open files, reopened there at resume."""
    if not _ROOT:
        return "no job"
    root = _ROOT[0]
    if os.path.dirname(root) == root:
        return "root is /"
    spec: pathspec.GitIgnoreSpec | None = None
    for where, candidate in (
        (root, os.path.normpath(path)),
        (os.path.realpath(root), os.path.realpath(path)),
    ):
        rel = os.path.relpath(candidate, where).replace(os.sep, "/")
        if not _inside(rel):
            return "outside"
        spec = spec or _ignore_spec(root)
        parts = rel.split("/")
        for i in range(1, len(parts)):
            directory = "/".join(parts[:i])
            if spec.match_file(directory + "/") or os.path.exists(
                os.path.join(where, directory, "pyvenv.cfg")
            ):
                return "left out"
        if spec.match_file(rel):
            return "left out"
    return None


class UnsafeWorkdirEntryError(CapturePortalError):
    """A checkpoint's working-directory entry would be written outside the directory."""

    code: ClassVar[str] = "CAPTURE_UNSAFE_WORKDIR_ENTRY"


class WorkdirEntry(NamedTuple):
    """One path of the working directory, relative, with ``/`` separators.

    ``kind``: ``"d"`` directory, ``"f"`` file (``data``: its bytes or an out-of-band buffer),
    ``"l"`` symbolic link (``data``: its target, relative to the link's directory).
    """

    path: str
    kind: str
    mode: int
    mtime_ns: int
    data: Any


class WorkdirFiles(NamedTuple):
    """What the checkpoint holds: the entries, the program's directory relative to the working
    directory (``None``: it was outside) and the working directory's path where it was taken."""

    entries: list[WorkdirEntry]
    cwd: str | None
    root: str = ""


class WorkdirReport(NamedTuple):
    """The size report of one capture."""

    total_bytes: int
    files: int
    biggest: list[tuple[str, int]]
    outside_links: list[str]


def _ignore_spec(root: str) -> pathspec.GitIgnoreSpec:
    lines = list(ALWAYS_IGNORED)
    with (
        contextlib.suppress(FileNotFoundError, IsADirectoryError),
        open(os.path.join(root, IGNORE_FILE), encoding="utf-8") as fh,
    ):
        lines += fh.read().splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _inside(rel: str) -> bool:
    """``rel`` is a plain relative path that stays inside the directory (lexically)."""
    if not rel or "\0" in rel or rel.startswith("/") or "\\" in rel:
        return False
    parts = rel.split("/")
    return all(p not in ("", ".", "..") for p in parts)


def _link_target(root: str, rel: str, target: str) -> str | None:
    """The link's target relative to its own directory if it stays inside ``root``, else None."""
    here = posixpath.dirname(rel)
    if os.path.isabs(target):
        resolved = os.path.relpath(os.path.normpath(target), root).replace(os.sep, "/")
    else:
        resolved = posixpath.normpath(posixpath.join(here, target))
    if resolved == "." or _inside(resolved):
        return posixpath.relpath(resolved, here or ".")
    return None


def _file_data(path: str, size: int) -> Any:
    """Small files inline; larger ones as a mapped out-of-band buffer (no copy here)."""
    if size < OUT_OF_BAND_BYTES:
        with open(path, "rb") as fh:
            return fh.read()
    with open(path, "rb") as fh:
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return pickle.PickleBuffer(mapped)


def portal_folders(root: str) -> tuple[str, ...]:
    """Portal's own folders inside ``root``, relative: its home and a local store (from the
    job's environment, as Portal's settings read it). None of them is ever carried."""
    from urllib.parse import unquote, urlsplit

    from portal.core.settings import Settings

    try:
        settings = Settings.load(plugins=False)
    except Exception:  # an invalid setting is the CLI's to report, not the capture's
        return ()
    places = [str(settings.home)]
    url = settings.storage_url
    if url.startswith("file://"):
        places.append(unquote(urlsplit(url).path))
    elif "://" not in url:
        places.append(url)
    base = os.path.realpath(root)
    found = []
    for place in places:
        rel = os.path.relpath(os.path.realpath(os.path.expanduser(place)), base)
        if rel != "." and _inside(rel.replace(os.sep, "/")):
            found.append(rel.replace(os.sep, "/"))
        elif rel == ".":
            found.append("")  # the whole directory is Portal's: carry nothing
    return tuple(found)


def _under(rel: str, folders: Sequence[str]) -> bool:
    return any(f == "" or rel == f or rel.startswith(f + "/") for f in folders)


def scan(root: str) -> tuple[WorkdirFiles, WorkdirReport]:
    """Read ``root``'s entries (see module docstring) and their size report."""
    spec = _ignore_spec(root)
    own = portal_folders(root)
    entries: list[WorkdirEntry] = []
    sizes: list[tuple[str, int]] = []
    outside: list[str] = []
    for rel, st in _walk(root, spec, own):
        full = os.path.join(root, rel)
        if stat.S_ISLNK(st.st_mode):
            target = _link_target(root, rel, os.readlink(full))
            if target is None:
                outside.append(rel)
                continue
            entries.append(WorkdirEntry(rel, "l", 0, st.st_mtime_ns, target))
        elif stat.S_ISDIR(st.st_mode):
            entries.append(WorkdirEntry(rel, "d", stat.S_IMODE(st.st_mode), st.st_mtime_ns, None))
        elif stat.S_ISREG(st.st_mode):
            try:
                data = _file_data(full, st.st_size)
            except OSError:
                continue  # removed meanwhile, or unreadable: not the program's to carry
            entries.append(WorkdirEntry(rel, "f", stat.S_IMODE(st.st_mode), st.st_mtime_ns, data))
            sizes.append((rel, st.st_size))
    cwd = os.getcwd()
    rel_cwd = os.path.relpath(cwd, root).replace(os.sep, "/")
    carried_cwd = rel_cwd if rel_cwd == "." or _inside(rel_cwd) else None
    sizes.sort(key=lambda item: -item[1])
    report = WorkdirReport(
        total_bytes=sum(size for _, size in sizes),
        files=len(sizes),
        biggest=sizes[:_BIGGEST_SHOWN],
        outside_links=outside,
    )
    return WorkdirFiles(entries, carried_cwd, root), report


def _walk(
    root: str, spec: pathspec.GitIgnoreSpec, own: Sequence[str] = ()
) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under ``root`` not ignored, parents before children, links not followed;
    Portal's own folders (``own``) left out whole."""
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        try:
            with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
                listing = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for entry in listing:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if spec.match_file(rel + "/" if is_dir else rel) or (own and _under(rel, own)):
                continue
            if is_dir and os.path.exists(os.path.join(entry.path, "pyvenv.cfg")):
                continue  # a virtual environment: installed packages, installed again there
            yield rel, st
            if is_dir:
                subdirs.append(rel)
        pending.extend(reversed(subdirs))


def large_note(root: str, report: WorkdirReport) -> str:
    """The note for a large working directory: the total, the biggest files, the way out."""
    biggest = ", ".join(f"{path} {units.size(size)}" for path, size in report.biggest)
    return (
        f"portal: note: the working directory {root} holds {units.size(report.total_bytes)} in "
        f"{report.files} files, carried with every checkpoint (biggest: {biggest}); list what "
        f"need not travel in {os.path.join(root, IGNORE_FILE)} (gitignore syntax)"
    )


def _check_entries(root: str, entries: Sequence[WorkdirEntry]) -> None:
    """Refuse the whole restore, before anything is written, if one entry could write outside
    ``root`` (the directories and links already there are followed as the writes would)."""
    root_real = os.path.realpath(root)
    for entry in entries:
        what = {"d": "directory", "f": "file", "l": "link"}.get(entry.kind)
        bad = None
        if what is None:
            bad = f"an unknown kind of entry {entry.kind!r}"
        elif not _inside(entry.path):
            bad = "a path that leads outside it (absolute, empty or with '..')"
        elif entry.kind == "l" and (
            not isinstance(entry.data, str)
            or _link_target(root, entry.path, entry.data) is None
            or os.path.isabs(entry.data)
        ):
            bad = f"a link whose target {entry.data!r} leads outside it"
        if bad is not None:
            raise UnsafeWorkdirEntryError(
                f"the checkpoint's working-directory {what or 'entry'} {entry.path!r} has {bad}; "
                "Portal writes nothing outside the job's working directory and does not resume "
                "this checkpoint. Resume from an earlier checkpoint, or run the job again",
                details={"path": entry.path, "kind": entry.kind},
            )
        _parent_inside(root_real, root, entry.path)


def _parent_inside(root_real: str, root: str, rel: str) -> None:
    """The entry's directory, as it resolves on disk now (links followed), is inside ``root``."""
    parent = os.path.realpath(os.path.join(root, posixpath.dirname(rel)))
    if parent != root_real and not parent.startswith(root_real + os.sep):
        raise UnsafeWorkdirEntryError(
            f"the checkpoint's working-directory entry {rel!r} would be written through a link "
            f"that leads outside the working directory {root} (to {parent}); Portal writes "
            "nothing outside it. Remove or replace that link in the working directory and "
            "resume again",
            details={"path": rel},
        )


def _clear(path: str) -> None:
    """Make room for an entry of another kind (a link never followed, a tree removed)."""
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def restore_files(root: str, files: WorkdirFiles) -> None:
    """Write ``files`` into ``root`` (checked first, see module docstring) and enter the
    program's directory there."""
    _check_entries(root, files.entries)
    own = portal_folders(root)
    if own:  # a checkpoint made before they were left out: never roll Portal's records back
        files = WorkdirFiles(
            [e for e in files.entries if not _under(e.path, own)], files.cwd, files.root
        )
    os.makedirs(root, exist_ok=True)
    if files.root:
        _MOVED[:] = [(files.root, os.path.abspath(root))]
    root_real = os.path.realpath(root)
    links = []
    held: set[tuple[int, int]] | None = None  # read once, the first time a file would change
    for entry in files.entries:
        if entry.kind == "l":
            links.append(entry)
            continue
        _parent_inside(root_real, root, entry.path)
        full = os.path.join(root, entry.path)
        if entry.kind == "d":
            if not os.path.isdir(full) or os.path.islink(full):
                _clear(full)
                os.mkdir(full)
            os.chmod(full, entry.mode | 0o700)
            continue
        current = _unchanged_or_inode(full, entry)
        if current is True:
            continue
        if current is not None:
            if held is None:
                held = held_open_files()
            if current in held:
                note_on_restore(
                    f"{entry.path} in the working directory was left as it is, not rolled back "
                    "to the checkpoint: it is open in another process or as this one's "
                    "redirected output, whose writes would be lost"
                )
                continue
        _write_file(full, entry)
    for entry in links:  # last: no file is written through a link made here
        _parent_inside(root_real, root, entry.path)
        full = os.path.join(root, entry.path)
        with contextlib.suppress(OSError):
            if os.readlink(full) == entry.data:
                continue
        _clear(full)
        os.symlink(entry.data, full)
    for entry in reversed(files.entries):  # directories' times after their contents
        if entry.kind == "d":
            with contextlib.suppress(OSError):
                os.utime(os.path.join(root, entry.path), ns=(entry.mtime_ns, entry.mtime_ns))
    if files.cwd is not None:
        target = os.path.normpath(os.path.join(root, files.cwd))
        with contextlib.suppress(OSError):
            os.chdir(target)


def _unchanged_or_inode(full: str, entry: WorkdirEntry) -> bool | tuple[int, int] | None:
    """True when the regular file at ``full`` is already ``entry`` (same size and modification
    time: a resume on the same machine), else its (device, inode), or None when there is none."""
    try:
        st = os.lstat(full)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    if st.st_size == memoryview(entry.data).nbytes and st.st_mtime_ns == entry.mtime_ns:
        return True
    return (st.st_dev, st.st_ino)


def held_open_files() -> set[tuple[int, int]]:
    """(device, inode) of every file some process has open, this one included (what Linux's
    ``/proc/PID/fd`` shows this user).

    A restore replaces a changed file with a new one (an atomic rename), so a process writing
    to the old one would write into a file nobody sees any more: a shell's ``> out.txt`` of the
    resumed runtime itself, or a ``tail -f`` writer beside the job. Such a file is left as it is.
    """
    found: set[tuple[int, int]] = set()
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.add((st.st_dev, st.st_ino))
    return found


def _write_file(full: str, entry: WorkdirEntry) -> None:
    data = memoryview(entry.data).cast("B")
    directory = os.path.dirname(full)
    fd, tmp = tempfile.mkstemp(prefix=".portal-restore-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, entry.mode)
        os.utime(tmp, ns=(entry.mtime_ns, entry.mtime_ns))
        if os.path.isdir(full) and not os.path.islink(full):
            _clear(full)  # a directory where the program had a file
        os.replace(tmp, full)  # replaces a link itself, never what it points to
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class WorkdirState:
    """The extension: capture scans the job's working directory, restore writes it back."""

    def __init__(self, warn_bytes: int | None = None) -> None:
        if warn_bytes is None:
            try:
                warn_bytes = int(os.environ.get(WARN_BYTES_ENV, WARN_BYTES))
            except ValueError:
                warn_bytes = WARN_BYTES
        self.warn_bytes = warn_bytes
        self.warned = False
        self.outside_said: set[str] = set()
        self.last_report: WorkdirReport | None = None

    def capture(self) -> WorkdirFiles | None:
        if not _ROOT:
            return None  # not a job run by the runtime (the engine used in-process): no files
        root = _ROOT[0]
        if os.path.dirname(root) == root:
            return None  # a job started at "/" has no working directory of its own to carry
        # What the program wrote to its open files but still holds in their buffers is part of
        # them as it sees them: written out before the scan reads them (they are reopened at
        # resume at their positions, see extensions.files).
        flush_open_files(root)
        files, report = scan(root)
        self.last_report = report
        if report.total_bytes > self.warn_bytes and not self.warned:
            self.warned = True
            print(large_note(root, report), file=sys.stderr, flush=True)
        new_outside = [p for p in report.outside_links if p not in self.outside_said]
        if new_outside:
            self.outside_said.update(new_outside)
            print(
                "portal: note: these links lead outside the working directory and are not "
                f"carried with the checkpoint (only its own files are): {', '.join(new_outside)}",
                file=sys.stderr,
                flush=True,
            )
        return files

    def restore(self, files: WorkdirFiles | None) -> None:
        if files is not None:
            restore_files(job_root(), files)


def specs() -> list[CaptureExtensionSpec]:
    state = WorkdirState()
    return [
        CaptureExtensionSpec(
            name="workdir_files",
            capture=state.capture,
            restore=state.restore,
            description="the files of the job's working directory (.portalignore leaves some out)",
        )
    ]


def flush_open_files(root: str) -> None:
    """Write out what the program's open files under ``root`` still buffer (text first, then the
    binary buffers under it), so that the working directory, read next, holds it. Only when
    Linux shows such a file open (``/proc/self/fd``) are the file objects looked for, among every
    object the garbage collector tracks; elsewhere always. A file that fails to flush is left to
    its reducer, which names it."""
    fds = _fds_under(root)
    if fds is not None and not fds:
        return
    texts: list[Any] = []
    buffers: list[Any] = []
    for obj in gc.get_objects():
        # By the object's type only: isinstance() would ask arbitrary objects for their
        # __class__, which some answer with side effects (a deprecation warning, a lazy import).
        t = type(obj)
        if issubclass(t, io.TextIOWrapper):
            texts.append(obj)
        elif issubclass(t, (io.BufferedWriter, io.BufferedRandom)):
            buffers.append(obj)
    for obj in texts + buffers:
        with contextlib.suppress(Exception):
            if not obj.closed and obj.writable() and (fds is None or obj.fileno() in fds):
                obj.flush()


def _fds_under(root: str) -> set[int] | None:
    """This process's file descriptors open on a path under ``root``; None if unknown."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    prefix = os.path.join(os.path.realpath(root), "")
    fds = set()
    for name in names:
        with contextlib.suppress(OSError, ValueError):
            if os.readlink(f"/proc/self/fd/{name}").startswith(prefix):
                fds.add(int(name))
    return fds
