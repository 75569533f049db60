"""Library code a checkpoint carries, and proof that the resuming machine has the same code.

A pause inside a framework's loop (``trainer.train()``, ``trainer.fit()``, a loop over
``accelerator.prepare(loader)``) carries frames and suspended generators whose code is an
installed library's. Their state travels like the script's (slots, value stack, the instruction
they continue at), their code as its bytecode, and their globals by the module's name: the new
machine imports the library again and the rebuilt frame runs in that module's namespace, calling
the library's other functions as installed there.

That is sound only where the installed library is the one that paused: a frame continues at a
byte offset of its own bytecode, and the rest of the library must agree with the state it left.
So each library code object carried is recorded (:class:`~portal.capture.image.LibraryCode`:
module, qualified name, distribution and version, and a digest of the code) and the resume
compares each with the code the installed module compiles to, before any line of the program or
of a library runs (:func:`verify`). A mismatch is refused naming the library and both versions.

The digest is of what executes (bytecode, constants, names, exception table, flags), not of line
numbers: a library rebuilt from the same source, or with an unrelated edit elsewhere in its
file, resumes; one whose carried function changed does not.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import os
import platform
import sys
import sysconfig
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import CodeType

from portal.capture.errors import LibraryMismatchError
from portal.capture.image import LibraryCode

__all__ = [
    "code_digest",
    "describe",
    "library_namespaces",
    "verify",
]


def library_namespaces(user: Mapping[int, str]) -> dict[int, str]:
    """``id(module.__dict__) -> module name`` for every loaded module that is not in ``user``
    (the user namespaces, pickled by name and by value): a library's namespace travels by name
    only. A module under several names is listed under its own ``__name__``."""
    found: dict[int, str] = {}
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType):
            continue
        key = id(module.__dict__)
        if key in user:
            continue
        if key not in found or getattr(module, "__name__", None) == name:
            found[key] = name
    return found


#: Digests already taken, by the identity of their code object (held, so the id stays its own).
#: Not by equality: two code objects that compare equal may differ in what the digest covers
#: (their qualified names).
_DIGESTS: dict[int, tuple[CodeType, str]] = {}
_DIGESTS_KEPT = 4096


def code_digest(code: CodeType) -> str:
    """A digest of what ``code`` executes, the same in every process for the same bytecode
    (``marshal``'s output is not: it depends on reference counts). Kept per code object: a
    library's code does not change while the process runs, and each checkpoint describes the
    same frames' code again."""
    kept = _DIGESTS.get(id(code))
    if kept is not None and kept[0] is code:
        return kept[1]
    h = hashlib.sha256()
    _feed(h, code)
    digest = h.hexdigest()[:32]
    if len(_DIGESTS) < _DIGESTS_KEPT:
        _DIGESTS[id(code)] = (code, digest)
    return digest


def _feed(h: hashlib._Hash, code: CodeType) -> None:
    for part in (
        code.co_code,
        code.co_exceptiontable,
        repr(
            (
                code.co_qualname,
                code.co_flags,
                code.co_argcount,
                code.co_posonlyargcount,
                code.co_kwonlyargcount,
                code.co_stacksize,
                code.co_names,
                code.co_varnames,
                code.co_cellvars,
                code.co_freevars,
            )
        ).encode(),
    ):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            h.update(b"c")
            _feed(h, const)
        else:
            h.update(f"({type(const).__name__!r}, {_const_text(const)})".encode())


def _const_text(const: object) -> str:
    """``repr(const)``, except that a frozenset (``x in {"a", "b"}`` compiles to one), also
    inside a tuple, lists its items sorted: its repr lists strings in an order that depends on
    the process's string-hash seed, which made an installed function differ from itself on
    resume in one process of a few."""
    text = repr(const)
    if "frozenset(" not in text:
        return text  # no set inside: a tuple of a thousand names stays one repr
    if isinstance(const, frozenset):
        return "frozenset({" + ", ".join(sorted(_const_text(e) for e in const)) + "})"
    if isinstance(const, tuple):
        items = [_const_text(e) for e in const]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return text


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    try:
        return importlib.metadata.packages_distributions()
    except Exception:  # a broken installed distribution cannot stop a checkpoint
        return {}


@functools.cache
def _stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(
        os.path.realpath(paths[key]) + os.sep for key in ("stdlib", "platstdlib") if paths.get(key)
    )


def _distribution_of(module_name: str, filename: str) -> tuple[str, str]:
    """The distribution and version a module's code comes from: ``("Python", "3.11.7")`` for
    the standard library, ``("?", "")`` for a module of no installed distribution."""
    real = os.path.realpath(filename)
    if real.startswith(_stdlib_dirs()) and "site-packages" not in real.split(os.sep):
        return "Python", platform.python_version()
    top = module_name.partition(".")[0]
    for dist in _distributions().get(top, ()):
        try:
            return dist, importlib.metadata.version(dist)
        except Exception:
            continue
    return "?", ""


def describe(code: CodeType, module_name: str) -> LibraryCode:
    """The record of one library code object a checkpoint carries."""
    dist, version = _distribution_of(module_name, code.co_filename)
    return LibraryCode(
        module=module_name,
        qualname=code.co_qualname,
        firstlineno=code.co_firstlineno,
        file=os.path.basename(code.co_filename),
        distribution=dist,
        version=version,
        digest=code_digest(code),
    )


def describe_all(codes: Iterable[tuple[CodeType, str]]) -> list[LibraryCode]:
    """One record per distinct code object (``codes``: each with its module's name)."""
    seen: dict[tuple[str, str, int], LibraryCode] = {}
    for code, module_name in codes:
        key = (module_name, code.co_qualname, code.co_firstlineno)
        if key not in seen:
            seen[key] = describe(code, module_name)
    return list(seen.values())


def _nested(code: CodeType) -> Iterator[CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _nested(const)


def _installed_codes(module_name: str) -> list[CodeType] | str:
    """Every code object the installed module compiles to, or why there is none."""
    try:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
    except Exception as exc:
        return f"importing it fails here ({type(exc).__name__}: {exc})"
    loader = getattr(module, "__loader__", None)
    get_code = getattr(loader, "get_code", None)
    if get_code is None:
        return "its module has no code to compare here"
    try:
        top = get_code(module_name)
    except Exception as exc:
        return f"its code cannot be read here ({type(exc).__name__}: {exc})"
    if top is None:
        return "its module has no code to compare here"
    return list(_nested(top))


def _installed_version(record: LibraryCode) -> str:
    if record.distribution == "Python":
        return platform.python_version()
    if record.distribution == "?":
        return ""
    try:
        return importlib.metadata.version(record.distribution)
    except Exception:
        return "not installed"


def verify(records: Sequence[LibraryCode], path: str = "the checkpoint") -> None:
    """Refuse (``LibraryMismatchError``) unless every carried library function is installed
    here exactly as it was paused; called before the checkpoint's state loads."""
    by_module: dict[str, list[CodeType] | str] = {}
    for record in records:
        codes = by_module.get(record.module)
        if codes is None:
            codes = by_module[record.module] = _installed_codes(record.module)
        why = None
        if isinstance(codes, str):
            why = codes
        else:
            candidates = [c for c in codes if c.co_qualname == record.qualname]
            if not candidates:
                why = f"it has no {record.qualname} here"
            elif not any(code_digest(c) == record.digest for c in candidates):
                why = f"its {record.qualname} differs here"
        if why is None:
            continue
        there = f"{record.distribution} {record.version}".strip()
        here = _installed_version(record)
        versions = (
            f"it was paused with {there}; this machine has {record.distribution} {here}"
            if record.distribution != "?"
            else "its module belongs to no installed distribution"
        )
        if record.distribution == "Python":
            way_out = f"resume it with Python {record.version}"
        elif record.distribution == "?":
            way_out = "resume it where the same code is installed"
        else:
            way_out = f"install {record.distribution}=={record.version} here"
        raise LibraryMismatchError(
            f"cannot resume from {path}: it was paused inside {record.qualname} of "
            f"{record.module} ({record.file}), and {why}: {versions}. A paused frame continues "
            f"at a position in its library's code, so the same code must be installed: {way_out}",
            details={
                "module": record.module,
                "qualname": record.qualname,
                "distribution": record.distribution,
                "checkpoint_version": record.version,
                "installed_version": here,
            },
        )
