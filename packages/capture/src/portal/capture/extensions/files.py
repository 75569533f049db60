"""File objects in a checkpoint: a closed file travels closed, an open file of the job's working
directory is opened again where it stood, and any other open file is named as one a checkpoint
cannot carry.

Real scripts keep file objects around: ``with open(path, "rb") as f: meta = pickle.load(f)`` at
module level leaves a closed ``f`` in the globals, ``torch.save(model, f)`` inside a ``with``
leaves one in a frame, and ``log = open("train.log", "a")``, opened once and written every step,
stays open for the whole run. The rule: a value that holds no live resource of the process
travels; one that does is re-created at resume where that is safe.

* **Closed files** of every ``io`` class (``FileIO``, the buffered readers and writers,
  ``TextIOWrapper``, ``BytesIO``, ``StringIO``, and subclasses of them) hold nothing: they
  travel as closed files of the same class, name, mode and (text) encoding, errors, newline and
  line buffering; using one raises ``ValueError`` as it did. (A placeholder on ``os.devnull``
  gives each layer its mode, then is closed.) Only the object the program holds is kept; the
  closed layers under it are made again.
* **Open regular files under the job's working directory** (:func:`.workdir.job_root`, whose
  files travel with the checkpoint as ``workdir_files``): each layer (``FileIO``, buffer, text
  wrapper) travels as its parameters and its position, and the layers under it as objects of
  their own, so the file, its ``.buffer`` and its ``.buffer.raw`` stay one chain and a file
  referenced from two places stays one object (the pickle's memo). What the program wrote but
  the file object still buffered is written out before the working directory is read
  (:func:`.workdir.flush_open_files`, called by the ``workdir_files`` capture), and again by the reducer.

  At resume the pickle loads *before* the capture extensions restore the working directory (on a
  new machine the file is not there yet). So while the pickle loads, an open file is made
  (:func:`new_file`) and opened on a placeholder, ``os.devnull`` in its own mode, so that what
  the load does with it works (``enumerate(f)`` on a paused frame's stack is rebuilt by calling
  ``iter(f)``); it is opened for real only once every extension is restored
  (:func:`reopen_file` asks :func:`portal.capture.resume.after_restore` for it), each layer
  again in the order the pickle made them, the raw one first: on the same path mapped into the resumed job's directory (:func:`.workdir.relocate`),
  with the same mode but never truncating or creating again (``w`` and ``x`` open the file that
  travelled, without ``O_TRUNC``/``O_CREAT``/``O_EXCL``; ``a`` still appends), the same buffer
  size, encoding, errors, newline, line buffering and write-through, and the same position.
  A text file's position is its ``tell()`` cookie (which ``seek`` takes back on a new wrapper of
  the same file, decoder state included); while a ``for line in f`` loop is running, Python has
  ``tell()`` disabled, and the position is found from the wrapper's own state instead: the
  characters it has decoded but not handed out yet (read with ctypes at the layout CPython
  3.11-3.13 share, checked against the object first) and the decoder's pending bytes locate the
  byte where the next line starts, verified by decoding the file from there. A read-ahead buffer
  is not carried: the resumed file reads again from its position (``tell()`` after a ``for``
  loop works again).
* **Anything else stays a value a checkpoint cannot carry**, named with the way out: a file
  outside the working directory or one ``.portalignore`` leaves out (it would not be there on a
  new machine), a pipe, socket or device, a file deleted or moved while open, one made from a
  raw file descriptor (``os.fdopen``, a subprocess's pipes), a ``BufferedRWPair``, a detached
  text wrapper, any other stream class (the pickler refuses those itself). The program's
  standard streams and their ``.buffer``/``.buffer.raw`` travel by reference, as the resumed
  process's own.

Carrying open files goes beyond the spec's list of what a checkpoint holds (it lists the files
of the working directory, not the program's open handles on them), as CRIU restores a process's
open files on the same paths at their positions. The functions a checkpoint's pickle calls while
loading (:func:`new_file`, :func:`reopen_file`, :func:`closed_file`, :func:`std_stream_part`)
are part of the stored format: rename none of them.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import functools
import io
import os
import stat
import sys
from collections.abc import Callable
from typing import Any, ClassVar, Final

from portal.capture import _rebuild
from portal.capture.extensions import workdir
from portal.capture.pickler import std_stream_ref
from portal.capture.restoring import after_restore
from portal.core.errors import CapturePortalError
from portal.core.specs import SerializerSpec

__all__ = [
    "FileNotReopenedError",
    "closed_file",
    "new_file",
    "reduce_file",
    "reopen_file",
    "serializer_specs",
    "std_stream_part",
]

_BUFFERED: Final = (io.BufferedReader, io.BufferedWriter, io.BufferedRandom)
_MEMORY: Final = (io.BytesIO, io.StringIO)
#: The classes this module knows, most derived first; a program's subclass of one is carried as
#: that class is, its own ``__dict__`` with it.
_BASES: Final = (io.TextIOWrapper, *_BUFFERED, io.FileIO, *_MEMORY, io.BufferedRWPair)
_STD_NAMES: Final = ("stdout", "stderr", "stdin", "__stdout__", "__stderr__", "__stdin__")
#: Reopening a file that travelled: it is there already, with the contents it had at the pause.
_NOT_AGAIN: Final = os.O_TRUNC | os.O_CREAT | os.O_EXCL
#: Kept in an ``io`` object's ``__dict__`` by ``IOBase.close`` (re-created by closing).
_IO_KEYS: Final = frozenset({"__IOBase_closed"})


class FileNotReopenedError(CapturePortalError):
    """An open file of the working directory could not be opened again at resume."""

    code: ClassVar[str] = "CAPTURE_FILE_NOT_REOPENED"


# -- capture ------------------------------------------------------------------------------------


def _base(cls: type) -> type | None:
    for base in cls.__mro__:
        if base in _BASES:
            return base
    return None


def _refuse(message: str) -> TypeError:
    """What a reducer raises for a value a checkpoint cannot carry: the engine names the value
    with this message (``f (_io.TextIOWrapper: TypeError: open file outside ...)``)."""
    return TypeError(message)


def reduce_file(obj: Any) -> Any:
    """The reducer for every ``io`` class this module knows (see the module docstring)."""
    ref = std_stream_ref(obj) or _std_part_ref(obj)
    if ref is not None:
        return ref
    base = _base(type(obj))
    if base is None:
        return NotImplemented
    if base is io.BufferedRWPair:
        raise _refuse(
            "a BufferedRWPair joins two streams of this process (pipes, sockets): it cannot "
            "travel (close it before the pause)"
        )
    try:
        closed = obj.closed
    except ValueError as exc:  # a text wrapper whose buffer was detached
        raise _refuse(f"a detached {base.__name__} cannot travel ({exc})") from exc
    if closed:
        return (closed_file, (_closed_layers(obj), _attrs(obj)))
    if base in _MEMORY:
        return NotImplemented  # an open BytesIO/StringIO holds only its value: pickled as it is
    _check_bottom(obj)  # first: a pipe or socket refuses even to tell its position
    if base is io.FileIO:
        state = _raw_state(obj)
    elif base is io.TextIOWrapper:
        state = _text_state(obj)
    else:
        state = _buffered_state(obj)
    return (new_file, (type(obj),), state, None, None, reopen_file)


def _attrs(obj: Any) -> dict[str, Any]:
    return {k: v for k, v in getattr(obj, "__dict__", {}).items() if k not in _IO_KEYS}


def _std_part_ref(obj: Any) -> tuple[Callable[..., Any], tuple[str, str]] | None:
    """``sys.stdout.buffer`` and ``sys.stdout.buffer.raw`` (and the others'), by reference."""
    for name in _STD_NAMES:
        buffer = getattr(getattr(sys, name, None), "buffer", None)
        if buffer is None:
            continue
        if obj is buffer:
            return (std_stream_part, (name, "buffer"))
        if obj is getattr(buffer, "raw", None):
            return (std_stream_part, (name, "buffer.raw"))
    return None


def _check_bottom(obj: Any) -> None:
    """Refuse ``obj`` unless the layers under it end in a file that may travel or in memory."""
    bottom = obj
    while isinstance(bottom, (io.TextIOWrapper, *_BUFFERED)):
        bottom = bottom.buffer if isinstance(bottom, io.TextIOWrapper) else bottom.raw
    if isinstance(bottom, io.FileIO):
        _travelling_path(bottom)
    elif not isinstance(bottom, _MEMORY):
        t = type(bottom)
        raise _refuse(
            f"an open file over a '{t.__module__}.{t.__qualname__}' (a socket's or a library's "
            "stream) belongs to this process and cannot travel (close it before the pause)"
        )


def _raw_state(raw: io.FileIO) -> dict[str, Any]:
    return {
        "layer": "raw",
        "path": _travelling_path(raw),
        "name": raw.name,
        "mode": raw.mode,
        "position": raw.tell(),
        "attrs": {k: v for k, v in _attrs(raw).items() if k != "name"},
    }


def _travelling_path(raw: io.FileIO) -> str:
    """The absolute path of the open file ``raw``, if it travels with the working directory;
    else the reason it cannot, raised."""
    name = raw.name
    if isinstance(name, int):
        raise _refuse(
            f"open file made from file descriptor {name} (os.fdopen, a pipe, a subprocess's "
            "stream): it belongs to this process and cannot travel (close it before the pause)"
        )
    fd = raw.fileno()
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        kind = _kind(st.st_mode)
        raise _refuse(
            f"open {kind} {os.fsdecode(name)}: pipes, sockets and devices belong to this "
            "machine and cannot travel (close it before the pause)"
        )
    path = _path_of(name, fd, st)
    if path is None or st.st_nlink == 0:
        raise _refuse(
            f"open file deleted or moved while open: {os.fsdecode(name)} (what the working "
            "directory holds is no longer it; close it before the pause)"
        )
    why = workdir.why_not_carried(path)
    if why is not None:
        raise _refuse(_not_carried_message(why, path))
    return path


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "pipe"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISDIR(mode):
        return "directory"
    return "special file"


def _path_of(name: str | bytes, fd: int, st: os.stat_result) -> str | None:
    """The absolute path of the open file ``fd``: its name, if that still leads to it (a relative
    name is taken from the current directory, which may have changed since), else the path
    Linux keeps for it; None when no path leads to it any more."""
    candidates = [os.path.abspath(os.fsdecode(name))]
    with contextlib.suppress(OSError):
        candidates.append(os.readlink(f"/proc/self/fd/{fd}"))
    for path in candidates:
        try:
            found = os.stat(path)
        except OSError:
            continue
        if (found.st_dev, found.st_ino) == (st.st_dev, st.st_ino):
            return path
    return None


def _not_carried_message(why: workdir.WhyNotCarried, path: str) -> str:
    if why == "outside":
        return (
            f"open file outside the job's working directory: {path} (close it before the pause, "
            "or keep it under the working directory)"
        )
    if why == "left out":
        return (
            f"open file the working directory's checkpoint leaves out: {path} (.portalignore, a "
            "cache, a checkpoint or a virtual environment; close it before the pause, or let "
            "the file travel)"
        )
    if why == "root is /":
        return (
            f"open file {path}: the job runs in /, whose files do not travel (close it before "
            "the pause, or run the job in a directory of its own)"
        )
    return (
        f"open file {path}: no working directory travels with this checkpoint (the program "
        "runs outside portal.runtime; close it before the pause)"
    )


def _buffered_state(buffered: Any) -> dict[str, Any]:
    if buffered.writable():
        buffered.flush()
    return {
        "layer": "buffered",
        "raw": buffered.raw,
        "size": _buffer_size(buffered),
        "position": buffered.tell(),
        "attrs": _attrs(buffered),
    }


def _buffer_size(buffered: Any) -> int:
    """The buffer size it was made with (``open``'s ``buffering``): CPython counts the buffer in
    the object's ``__sizeof__``, the one place it shows."""
    size = int(buffered.__sizeof__()) - type(buffered).__basicsize__
    return size if size > 0 else io.DEFAULT_BUFFER_SIZE


def _text_state(text: Any) -> dict[str, Any]:
    if text.writable():
        text.flush()
    view = _text_view(text)
    return {
        "layer": "text",
        "buffer": text.buffer,
        "encoding": text.encoding,
        "errors": text.errors,
        "newline": _newline(view),
        "line_buffering": text.line_buffering,
        "write_through": text.write_through,
        "chunk_size": text._CHUNK_SIZE,
        "position": _text_position(text, view),
        "attrs": _attrs(text),
    }


class _TextIO(ctypes.Structure):
    """The head of CPython's ``textio`` struct (Modules/_io/textio.c), the same in 3.11-3.13 on
    64-bit release builds; :func:`_text_view` checks it against the object before trusting it."""

    _fields_ = (
        ("ob_refcnt", ctypes.c_ssize_t),
        ("ob_type", ctypes.c_void_p),
        ("ok", ctypes.c_int),
        ("detached", ctypes.c_int),
        ("chunk_size", ctypes.c_ssize_t),
        ("buffer", ctypes.c_void_p),
        ("encoding", ctypes.c_void_p),
        ("encoder", ctypes.c_void_p),
        ("decoder", ctypes.c_void_p),
        ("readnl", ctypes.c_void_p),
        ("errors", ctypes.c_void_p),
        ("writenl", ctypes.c_void_p),
        ("line_buffering", ctypes.c_ubyte),
        ("write_through", ctypes.c_ubyte),
        ("readuniversal", ctypes.c_ubyte),
        ("readtranslate", ctypes.c_ubyte),
        ("writetranslate", ctypes.c_ubyte),
        ("seekable", ctypes.c_ubyte),
        ("has_read1", ctypes.c_ubyte),
        ("telling", ctypes.c_ubyte),
        ("finalizing", ctypes.c_ubyte),
        ("encodefunc", ctypes.c_void_p),
        ("encoding_start_of_stream", ctypes.c_ubyte),
        ("decoded_chars", ctypes.c_void_p),
        ("decoded_chars_used", ctypes.c_ssize_t),
        ("pending_bytes", ctypes.c_void_p),
        ("pending_bytes_count", ctypes.c_ssize_t),
        ("snapshot", ctypes.c_void_p),
    )


def _text_view(text: Any) -> _TextIO | None:
    """The wrapper's C state, read only; None unless it is a C ``TextIOWrapper`` whose fields
    at the expected places are the object's own (its buffer, encoding, errors, flags)."""
    if sys.implementation.name != "cpython" or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    if type(text).__basicsize__ < ctypes.sizeof(_TextIO):
        return None
    view = _TextIO.from_address(id(text))
    try:
        matches = (
            view.ok == 1
            and view.detached == 0
            and view.buffer == id(text.buffer)
            and view.encoding == id(text.encoding)
            and view.errors == id(text.errors)
            and view.line_buffering == text.line_buffering
            and view.write_through == text.write_through
            and view.chunk_size == text._CHUNK_SIZE
        )
    except (ValueError, AttributeError):
        return None
    return view if matches else None


def _object_at(address: int | None) -> Any:
    """The object a C field points to (None for NULL); the wrapper keeps it alive."""
    if not address:
        return None
    return ctypes.cast(address, ctypes.py_object).value


def _newline(view: _TextIO | None) -> str | None:
    """``open``'s ``newline``: the wrapper keeps it only in C (``readnl``, NULL for None)."""
    if view is None:
        return None
    value = _object_at(view.readnl)
    return value if isinstance(value, str) else None


def _text_position(text: Any, view: _TextIO | None) -> int:
    """A ``seek`` cookie for where the program's next read or write of ``text`` happens.

    ``tell()`` gives it, except after a ``for line in text`` loop has read: the loop turns
    ``tell()`` off and keeps no snapshot of the decoder (a ``flush()`` turns ``tell()`` on again,
    and it then answers the buffer's position, past what was decoded ahead): then the position
    is found from the wrapper's state (:func:`_position_while_iterating`)."""
    if view is None or not view.decoder or view.snapshot:
        try:
            return int(text.tell())
        except OSError as exc:
            raise _refuse(f"the position of open file {text.name!r} cannot be told: {exc}") from exc
    position = _position_while_iterating(text, view)
    if position is None:
        raise _refuse(
            f"the position of open file {text.name!r} cannot be found while a for loop reads it "
            "(an encoding or error handler whose bytes do not map back); close it before the "
            "pause, or read it with readline()"
        )
    return position


def _position_while_iterating(text: Any, view: _TextIO) -> int | None:
    """The cookie for the character a ``for line in text`` loop hands out next (``tell()`` is
    disabled meanwhile): the bytes fed to the decoder end at the buffer's position; the
    characters decoded but not handed out yet and the decoder's pending bytes are the end of
    them; the start of those characters is the byte ``start`` from which a new decoder, fed up
    to that end, gives exactly those characters and ends in the same state."""
    decoder = _object_at(view.decoder)
    if decoder is None:
        return None
    decoded = _object_at(view.decoded_chars)
    remaining = decoded[view.decoded_chars_used :] if isinstance(decoded, str) else ""
    pending, flags = decoder.getstate()
    end = text.buffer.tell()
    before = end - len(pending)
    newline = _newline(view)
    try:
        least = len(remaining.encode(text.encoding, text.errors))
    except (UnicodeError, LookupError):
        return None
    # Universal newlines read "\r\n" as one "\n": each may stand for one byte more; and a
    # final "\r" is held back (flag 1) until the decoder sees whether "\n" follows.
    universal = newline is None or newline == ""
    extra = remaining.count("\n") if newline is None else 0
    extra += flags & 1 if universal else 0
    start_flags = [0, flags & ~1 if universal else flags]  # a line starts with no CR pending
    for start in range(before - least, before - least - extra - 1, -1):
        if start < 0:
            break
        data = _read_at(text, start, end)
        if data is None:
            return None
        for start_flag in dict.fromkeys(start_flags):
            fresh = _decoder(text.encoding, text.errors, newline)
            fresh.setstate((b"", start_flag))
            try:
                out = fresh.decode(data, False)
            except UnicodeError:
                continue
            if out == remaining and fresh.getstate() == (pending, flags):
                return _cookie(start, start_flag)
    return None


def _decoder(encoding: str, errors: str, newline: str | None) -> Any:
    """A decoder like the wrapper's own (``TextIOWrapper.__init__``)."""
    decoder: Any = codecs.getincrementaldecoder(encoding)(errors)
    if newline is None or newline == "":
        decoder = io.IncrementalNewlineDecoder(decoder, translate=newline is None)
    return decoder


def _cookie(start: int, dec_flags: int) -> int:
    """A C ``TextIOWrapper`` ``seek`` cookie (Modules/_io/textio.c: the start position, then the
    decoder's flags as a C int, little-endian) for a decoder started fresh at ``start``."""
    if dec_flags and sys.byteorder != "little":
        raise _refuse("a text file's position cannot be carried on a big-endian machine")
    return start | (dec_flags & 0xFFFFFFFF) << 64


def _read_at(text: Any, start: int, end: int) -> bytes | None:
    """Bytes ``start:end`` of the file under ``text``, leaving every position as it is."""
    raw: Any = text.buffer
    while not isinstance(raw, (io.FileIO, io.BytesIO)) and hasattr(raw, "raw"):
        raw = raw.raw
    if isinstance(raw, io.BytesIO):
        return bytes(raw.getbuffer()[start:end])
    if isinstance(raw, io.FileIO):
        return os.pread(raw.fileno(), end - start, start)
    return None


def _closed_layers(obj: Any) -> list[tuple[Any, ...]]:
    """What makes a closed file again, outermost layer first."""
    layers: list[tuple[Any, ...]] = []
    current = obj
    while True:
        cls = type(current)
        base = _base(cls)
        if base is io.TextIOWrapper:
            layers.append(
                (
                    "text",
                    cls,
                    current.encoding,
                    current.errors,
                    _newline(_text_view(current)),
                    current.line_buffering,
                    current.write_through,
                )
            )
            current = current.buffer
        elif base in _BUFFERED:
            layers.append(("buffered", cls))
            current = current.raw
        elif base is io.FileIO:
            layers.append(("raw", cls, current.name, current.mode))
            return layers
        elif base in _MEMORY:
            layers.append(("memory", cls))
            return layers
        else:
            t = type(current)
            raise _refuse(f"a closed file over a '{t.__module__}.{t.__qualname__}' cannot travel")


# -- load (the stored format) --------------------------------------------------------------------


def std_stream_part(name: str, attrs: str) -> Any:
    """``sys.<name>.buffer`` (``attrs`` ``"buffer"``) or ``.buffer.raw`` of the resumed
    process."""
    obj = _rebuild.std_stream(name)
    for attr in attrs.split("."):
        obj = getattr(obj, attr)
    return obj


def new_file(cls: type) -> Any:
    """An empty (uninitialized) file object of ``cls``, opened later by :func:`reopen_file`."""
    base = _base(cls)
    if base is None:
        raise TypeError(f"checkpoint holds a file of an unknown class {cls!r}")
    return base.__new__(cls)  # type: ignore[call-overload]


def reopen_file(obj: Any, state: dict[str, Any]) -> None:
    """Make ``obj`` a valid file at once, open on a placeholder (``os.devnull``, with its own
    mode and parameters), and open it for real once the resumed process's state is restored
    (:func:`portal.capture.resume.after_restore`; at once outside a resume). The placeholder
    is for what the load itself does with the file: ``enumerate(f)`` or ``zip(f, g)`` on a
    paused frame's stack is rebuilt by calling ``iter(f)``, which an empty file refuses."""
    _open_layer(obj, state, real=False)
    after_restore(functools.partial(_open_layer, obj, state, real=True))


def _open_layer(obj: Any, state: dict[str, Any], *, real: bool) -> None:
    """(Re)initialize one layer of ``obj`` (the layers under it are done already, being made
    first): on the placeholder, or on the file at its position."""
    layer = state["layer"]
    base = _base(type(obj))
    if layer == "raw":
        if real:
            _reopen_raw(obj, state)
        else:
            _placeholder_raw(obj, state["name"], state["mode"])
    elif layer == "buffered" and base in _BUFFERED:
        base.__init__(obj, state["raw"], state["size"])
        if real:
            obj.seek(state["position"])
    elif layer == "text":
        io.TextIOWrapper.__init__(
            obj,
            state["buffer"],
            encoding=state["encoding"],
            errors=state["errors"],
            newline=state["newline"],
            line_buffering=state["line_buffering"],
            write_through=state["write_through"],
        )
        obj._CHUNK_SIZE = state["chunk_size"]
        if real and obj.seekable():
            obj.seek(state["position"])
    else:
        raise TypeError(f"checkpoint holds a file layer {layer!r} of {type(obj)!r}")
    obj.__dict__.update(state["attrs"])


def _placeholder_raw(raw: io.FileIO, name: Any, mode: str) -> None:
    io.FileIO.__init__(raw, os.devnull, mode, opener=_open_devnull)
    raw.name = name


def _reopen_raw(raw: io.FileIO, state: dict[str, Any]) -> None:
    path = workdir.relocate(state["path"])
    try:
        io.FileIO.__init__(raw, path, state["mode"], opener=_open_existing)
        raw.seek(state["position"])
    except OSError as exc:
        raise FileNotReopenedError(
            f"the program's open file {path} cannot be opened again ({exc.strerror or exc}); it "
            "travelled with the working directory's files and was restored there just before. "
            "Make it readable and writable as the program opened it and resume again, or resume "
            "from an earlier checkpoint",
            details={"path": path, "mode": state["mode"]},
        ) from exc
    name = state["name"]
    if os.path.isabs(os.fsdecode(name)):
        moved = workdir.relocate(os.fsdecode(name))
        name = os.fsencode(moved) if isinstance(name, bytes) else moved
    raw.name = name


def _open_existing(path: str, flags: int) -> int:
    return os.open(path, flags & ~_NOT_AGAIN)


def _open_devnull(path: str, flags: int) -> int:
    return os.open(os.devnull, os.O_RDWR)


def closed_file(layers: list[tuple[Any, ...]], attrs: dict[str, Any]) -> Any:
    """A closed file like the one saved: each layer made on a placeholder of ``os.devnull``
    (the innermost first), so that it has the class, name and mode it had, then closed."""
    obj: Any = None
    for layer in reversed(layers):
        kind, cls = layer[0], layer[1]
        base = _base(cls)
        if base is None:
            raise TypeError(f"checkpoint holds a closed file of an unknown class {cls!r}")
        made: Any = base.__new__(cls)  # type: ignore[call-overload]
        if kind == "raw":
            _placeholder_raw(made, layer[2], layer[3])
        elif kind == "memory":
            base.__init__(made)  # type: ignore[misc]
        elif kind == "buffered":
            base.__init__(made, obj)  # type: ignore[misc]
        elif kind == "text":
            _, _, encoding, errors, newline, line_buffering, write_through = layer
            io.TextIOWrapper.__init__(
                made,
                obj,
                encoding=encoding,
                errors=errors,
                newline=newline,
                line_buffering=line_buffering,
                write_through=write_through,
            )
        else:
            raise TypeError(f"checkpoint holds a closed file layer {kind!r}")
        obj = made
    obj.close()
    obj.__dict__.update(attrs)
    return obj


def serializer_specs() -> list[SerializerSpec]:
    reducers = {f"io.{cls.__name__}": reduce_file for cls in _BASES}
    return [
        SerializerSpec(
            name="capture_files",
            reducers=reducers,
            description="closed files travel closed; open files of the working directory are "
            "reopened at their positions",
        )
    ]
