"""The corpus of real, public programs that test_capture_real_programs.py pauses and resumes.

Each entry names a distribution on the package registry, pinned to an exact version and to the
SHA-256 of its archive, what of the archive goes into the job's working directory, and the
program to run there: the program's own script, or a driver of ours (corpus/real_programs/) that
imports the program's modules and prints deterministic results. The programs' modules sit in the
working directory, so they are the job's own code: a pause can be taken inside them and their
globals travel by value, as for any script's modules.

No third-party code is kept in the repository. The archives are downloaded at test time with
``pip download --no-deps`` into a cache outside it (``$PORTAL_CORPUS_CACHE``, by default
``~/.cache/portal-test-corpus/<dist>-<version>/``) and unpacked there with zipfile/tarfile.
uv has no ``download`` command, and the test environments that nox makes with uv have no pip:
the pip used is this interpreter's if it has one, else the tools venv's (``.venv-tools``, which
``./dev`` makes) or one on ``PATH``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
DRIVERS = HERE / "corpus" / "real_programs"
SHAPES = HERE / "corpus" / "real_shapes"
CACHE = Path(os.environ.get("PORTAL_CORPUS_CACHE") or Path.home() / ".cache" / "portal-test-corpus")


class Unavailable(Exception):
    """The archive could not be had (no registry, no pip): the test skips with this reason."""


@dataclass(frozen=True)
class Dist:
    """A distribution's archive on the registry, pinned by version and digest."""

    name: str
    version: str
    archive: str  # the file pip downloads
    sha256: str

    @property
    def sdist(self) -> bool:
        return not self.archive.endswith(".whl")

    @property
    def folder(self) -> Path:
        return CACHE / f"{self.name}-{self.version}"


PYPERFORMANCE = Dist(
    "pyperformance",
    "1.14.0",
    "pyperformance-1.14.0-py3-none-any.whl",
    "94068ac2935b6952ccb5e8a302eb9cebc26e82454494bef6e53822738adf0049",
)
PYCODESTYLE = Dist(
    "pycodestyle",
    "2.15.0",
    "pycodestyle-2.15.0-py2.py3-none-any.whl",
    "12fd2f73c7b8ee8845a0431111df8faf4c1a07d6e64e2ee7f0c74014dab14181",
)
PYFLAKES = Dist(
    "pyflakes",
    "4.1.0",
    "pyflakes-4.1.0-py2.py3-none-any.whl",
    "b2e05e6bac8e49b67be2a6ffa63422c60f7193fc72e8180255907b41ec997dc1",
)
SQLPARSE = Dist(
    "sqlparse",
    "0.6.1",
    "sqlparse-0.6.1-py3-none-any.whl",
    "3be5a72d04c873d690d7c6dedd33d6fae2ef82759881ceec02fc2efd0cba564f",
)
CHESS = Dist(
    "chess",
    "1.10.0",
    "chess-1.10.0-py3-none-any.whl",
    "48ff7c084a370811819cfc753c2ee159942356ada70824666bd01ee3fca170d0",
)
PYAES = Dist(
    "pyaes",
    "1.6.1",
    "pyaes-1.6.1.tar.gz",
    "02c1b1405c38d3c370b085fb952dd8bea3fadcee6411ad99f312cc129c536d8f",
)
PIDIGITS = Dist(
    "pidigits",
    "0.5",
    "pidigits-0.5.zip",
    "16c74d29f0d715550195ef262eb0f58ad1e0ab7f3b909cff6d2a162c412e5c9b",
)
MPMATH = Dist(
    "mpmath",
    "1.4.1",
    "mpmath-1.4.1-py3-none-any.whl",
    "dc4f0ea2304480d4a9a48a94c1020571558ade522b44a6912efac63a586e140f",
)
TORCHBEARER = Dist(
    "torchbearer",
    "0.5.5",
    "torchbearer-0.5.5-py3-none-any.whl",
    "0dda4a764f92543726975130d6c971f4af58c9219728d02c0823676a4b7baaa6",
)
IGNITE = Dist(
    "pytorch-ignite",
    "0.5.5",
    "pytorch_ignite-0.5.5-py3-none-any.whl",
    "9a397b0899968612efd00ac75bad64f20a9a91a8244f37bdcb8888af61455cf9",
)

# -- downloading -----------------------------------------------------------------------------


def pip_command() -> list[str] | None:
    """A pip to download with: this interpreter's, the tools venv's, or one on PATH."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    for candidate in (
        ROOT / ".venv-tools" / "bin" / "pip",
        shutil.which("pip3"),
        shutil.which("pip"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return [str(candidate)]
    return None


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two sessions fetching the same archive wait here
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(dist: Dist) -> Path:
    """The unpacked archive of ``dist`` (downloaded once into the cache)."""
    folder = dist.folder
    tree = folder / "tree"
    if (folder / ".complete").exists():
        return tree
    with _locked(folder):
        if (folder / ".complete").exists():
            return tree
        archive = folder / dist.archive
        if not archive.exists():
            _download(dist, folder)
        digest = _digest(archive)
        if digest != dist.sha256:
            archive.unlink()
            raise AssertionError(
                f"{dist.archive}: SHA-256 {digest}, pinned {dist.sha256}: the registry served "
                "another file for this pin; check it and update the pin"
            )
        shutil.rmtree(tree, ignore_errors=True)
        if dist.archive.endswith((".whl", ".zip")):
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(tree)
        else:
            with tarfile.open(archive) as tf:
                tf.extractall(tree, filter="data")
        (folder / ".complete").write_text(f"{dist.archive} {digest}\n")
    return tree


def _download(dist: Dist, folder: Path) -> None:
    pip = pip_command()
    if pip is None:
        raise Unavailable("no pip to download the corpus with (this venv, .venv-tools, PATH)")
    binaries = ["--no-binary", ":all:"] if dist.sdist else ["--only-binary", ":all:"]
    with tempfile.TemporaryDirectory(dir=folder) as into:
        cmd = [
            *pip,
            "download",
            "--no-deps",
            *binaries,
            "--disable-pip-version-check",
            "--no-input",
            "--timeout",
            "30",
            "--retries",
            "1",
            "--dest",
            into,
            f"{dist.name}=={dist.version}",
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        except subprocess.TimeoutExpired:
            raise Unavailable(f"pip download {dist.name}=={dist.version} timed out") from None
        got = Path(into) / dist.archive
        if done.returncode != 0 or not got.exists():
            lines = [
                line
                for line in (done.stderr + done.stdout).splitlines()
                if line.strip() and not line.startswith("WARNING: Location")
            ]
            raise Unavailable(
                f"cannot download {dist.name}=={dist.version} from the registry: "
                + " | ".join(lines[-3:] or [f"pip exited {done.returncode}"])
            )
        os.replace(got, folder / dist.archive)


# -- the programs ----------------------------------------------------------------------------

#: tqdm's elapsed/remaining times and rates, and pycodestyle's --benchmark figures.
TQDM_TIMES = (
    r"\d+:\d\d(?::\d\d)?(?:<(?:\d+:\d\d(?::\d\d)?|\?))?",  # elapsed<remaining
    r" *(?:\?|\d+(?:\.\d+)?[kMG]?)(?:it/s|s/it)",  # the rate, with its padding ("{:5.2f}")
    # the spaces that pad a bar to the length of the one it overwrites, whose time fields
    # were as wide as the clock made them
    r"(?m) *(?=\r|$)",
)
#: tqdm draws a bar again when 0.1 s have passed (and always when asked to): how many times it
#: draws is a matter of time, not of the program. With no minimum interval it draws every step.
TQDM_ENV = {"TQDM_MININTERVAL": "0"}
#: A torch program's arithmetic made reproducible run to run, so that a difference can only be
#: Portal's: one intra-op thread, and MKL on one code path whatever the load and memory layout.
#: Without it, plain runs of the ignite driver alone disagree now and then (seed 338476426 on CI:
#: one plain run's first loss 0.36538127064704895, another's 0.36538493633270264; 1 in 20 here).
TORCH_ENV = {
    **TQDM_ENV,
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MKL_CBWR": "COMPATIBLE",
}

#: Standard-library modules (in CPython 3.11-3.13 alike) that the linters check: real code the
#: machine has anyway; the copies go into the job's working directory.
LINT_MODULES = [
    "argparse",
    "ast",
    "base64",
    "bdb",
    "calendar",
    "cmd",
    "code",
    "codecs",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "difflib",
    "dis",
    "enum",
    "filecmp",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "gettext",
    "glob",
    "gzip",
    "heapq",
    "hmac",
    "imaplib",
    "inspect",
    "ipaddress",
    "locale",
    "mailbox",
    "netrc",
    "operator",
    "optparse",
    "pickle",
    "pprint",
    "queue",
    "quopri",
    "random",
    "shlex",
    "shutil",
    "smtplib",
    "socket",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "textwrap",
    "threading",
    "tokenize",
    "trace",
    "traceback",
    "turtle",
    "typing",
    "uuid",
    "wave",
    "weakref",
]


def _stdlib_sources(names: list[str] | None) -> Callable[[Path], list[str]]:
    """Copy standard-library modules into ``src/`` and name them as arguments (``None``: every
    module at the top of this interpreter's library and in a few of its packages)."""

    def lay(work: Path) -> list[str]:
        lib = Path(sysconfig.get_paths()["stdlib"])
        if names is None:
            files = sorted(lib.glob("*.py"))
            for package in ("asyncio", "email", "json", "logging", "xml/dom"):
                files += sorted(lib.glob(f"{package}/*.py"))
        else:
            files = [lib / f"{n}.py" for n in names]
        out = []
        for f in files:
            target = Path("src") / f.relative_to(lib)
            (work / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, work / target)
            out.append(str(target))
        return out

    return lay


@dataclass(frozen=True)
class Program:
    name: str
    dist: Dist | None  # None: a program of ours (corpus/real_shapes)
    shape: str
    script: str  # what runs, relative to the working directory
    copies: tuple[tuple[str, str], ...] = ()  # (path in the unpacked archive, path in the job)
    ours: tuple[Path, ...] = ()  # driver and helper files of ours, copied beside the script
    args: tuple[str, ...] = ()
    inputs: Callable[[Path], list[str]] | None = None  # lays out input files, gives arguments
    wall_clock: tuple[str, ...] = ()  # regexes of wall-clock fields in the output
    files: tuple[str, ...] = ()  # files the program writes, compared like its output
    weights: str | None = None  # a torch state_dict file, compared tensor by tensor, bitwise
    torch: bool = False
    env: dict[str, str] = field(default_factory=dict)

    def lay_out(self, work: Path) -> list[str]:
        """Fill ``work`` (made empty) with the program; the arguments to run it with."""
        if self.dist is not None:
            tree = fetch(self.dist)
            for source, target in self.copies:
                src, dst = tree / source, work / target
                dst.parent.mkdir(parents=True, exist_ok=True)
                if src.is_dir():
                    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copyfile(src, dst)
        for path in self.ours:
            shutil.copyfile(path, work / path.name)
        extra = self.inputs(work) if self.inputs is not None else []
        return [*self.args, *extra]


def _benchmark(name: str, shape: str, *, data: bool = False, **kw: object) -> Program:
    base = f"pyperformance/data-files/benchmarks/bm_{name}"
    copies = [(f"{base}/run_benchmark.py", f"bm_{name}.py")]
    if data:
        copies.append((f"{base}/data", "data"))
    return Program(
        name=f"pyperformance-{name.replace('_', '-')}",
        dist=PYPERFORMANCE,
        shape=shape,
        script=f"run_{name}.py",
        copies=tuple(copies),
        ours=(DRIVERS / f"run_{name}.py", DRIVERS / "pyperf.py"),
        **kw,  # type: ignore[arg-type]
    )


#: Left out: micrograd 0.1.0 (a training loop on its scalar autograd engine). Its backward()
#: orders the graph through ``set``s of Value objects, whose order follows their addresses, so the
#: float sums of the gradients, and the printed losses, change in the last bits with the heap's
#: layout: a plain run differs from itself once one more module is imported first. No checkpoint
#: can reproduce addresses; a differential test of it would test the heap, not the capture.
PROGRAMS: list[Program] = [
    _benchmark(
        "nbody",
        "float loops over module-level lists shared by several globals and default arguments",
    ),
    _benchmark(
        "richards",
        "OS-scheduler simulation: a class hierarchy, a module-global work area mutated in place",
    ),
    _benchmark(
        "deltablue",
        "constraint solver: deep object graphs, a module global rebound with `global planner`",
    ),
    _benchmark(
        "go",
        "Monte-Carlo tree search from the global random generator, `global` move counters",
    ),
    _benchmark("hexiom", "puzzle solver: recursion, dicts of lists, output to an io.StringIO"),
    _benchmark(
        "raytrace",
        "ray tracer (vector classes) writing each picture itself with `with open(..., 'wb')`",
        files=tuple(f"frame{i}.ppm" for i in range(10)),
    ),
    _benchmark(
        "pyflate",
        "pure-Python bzip2 decoder reading its data file through a file object held open",
        data=True,
    ),
    _benchmark("nqueens", "brute force through the program's own generators (permutations)"),
    Program(
        name="pycodestyle",
        dist=PYCODESTYLE,
        shape="the style checker's own command line (optparse, tokenize generators, "
        "lru_cache, checks registered at import), unmodified, over 58 stdlib modules",
        script="pycodestyle.py",
        copies=(("pycodestyle.py", "pycodestyle.py"),),
        args=("--statistics", "--benchmark"),
        inputs=_stdlib_sources(LINT_MODULES),
        # "%-7.2f seconds elapsed", "%-7d files per second (N total)": a figure and its padding
        wall_clock=(r"(?m)^[0-9.]+ +(?=seconds elapsed$)", r"(?m)^\d+ +(?=[a-z ]+ per second)"),
    ),
    Program(
        name="pyflakes",
        dist=PYFLAKES,
        shape="the checker's own main() (argparse, signal handlers it installs, AST visitor "
        "with recursion, its own generators, functools.cache) over every stdlib module",
        script="run_pyflakes.py",
        copies=(("pyflakes", "pyflakes"),),
        ours=(DRIVERS / "run_pyflakes.py",),
        inputs=_stdlib_sources(None),
    ),
    Program(
        name="chess",
        dist=CHESS,
        shape="random games and perft with python-chess: bitboards, the library's move "
        "generators, a Board's move stack, PGN export",
        script="run_chess.py",
        copies=(("chess", "chess"),),
        ours=(DRIVERS / "run_chess.py",),
    ),
    Program(
        name="pyaes",
        dist=PYAES,
        shape="pure-Python AES in five modes through a streaming feeder; functions the "
        "package attaches to its classes at import",
        script="run_pyaes.py",
        copies=(("pyaes-1.6.1/pyaes", "pyaes"),),
        ours=(DRIVERS / "run_pyaes.py",),
    ),
    Program(
        name="pidigits",
        dist=PIDIGITS,
        shape="unbounded spigot generators (the program's own) held in a dict while the "
        "loop pulls digits from them",
        script="run_pidigits.py",
        copies=(("pidigits-0.5/pidigits", "pidigits"),),
        ours=(DRIVERS / "run_pidigits.py",),
    ),
    Program(
        name="mpmath",
        dist=MPMATH,
        shape="arbitrary precision with a global context object and classes mpmath makes at "
        "import; special functions, quadrature, sums, root finding",
        script="run_mpmath.py",
        copies=(("mpmath", "mpmath"),),
        ours=(DRIVERS / "run_mpmath.py",),
        env={"MPMATH_NOGMPY": "1"},
    ),
    Program(
        name="sqlparse",
        dist=SQLPARSE,
        shape="a SQL formatter: lexer, statement splitter and filter stack are the "
        "library's own generators; statement objects in token trees",
        script="run_sqlparse.py",
        copies=(("sqlparse", "sqlparse"),),
        ours=(DRIVERS / "run_sqlparse.py",),
    ),
    Program(
        name="torchbearer",
        dist=TORCHBEARER,
        shape="torch training through torchbearer's Trial (its loop, metrics, callbacks, "
        "tqdm bars), a 2-worker DataLoader",
        script="run_torchbearer.py",
        copies=(("torchbearer", "torchbearer"),),
        ours=(DRIVERS / "run_torchbearer.py",),
        wall_clock=TQDM_TIMES,
        weights="weights.pt",
        torch=True,
        env=TORCH_ENV,
    ),
    Program(
        name="pytorch-ignite",
        dist=IGNITE,
        shape="torch training through ignite's Engines (event handlers, metrics, LR "
        "scheduler, tqdm ProgressBar), a 2-worker DataLoader",
        script="run_ignite.py",
        copies=(("ignite", "ignite"),),
        ours=(DRIVERS / "run_ignite.py",),
        args=("--epochs", "6"),
        wall_clock=TQDM_TIMES,
        weights="weights.pt",
        torch=True,
        env=TORCH_ENV,
    ),
    Program(
        name="train-script-shapes",
        dist=None,
        shape="ours: argparse, config exec'd into globals, a log file open at module level, "
        "train() reading globals, 2-worker DataLoader, tqdm, torch.save in `with open` per epoch",
        script="train.py",
        ours=(SHAPES / "train.py", SHAPES / "config_small.py"),
        args=("--config", "config_small.py"),
        wall_clock=TQDM_TIMES,
        files=("train.log", "checkpoint-7.pt"),
        weights="weights.pt",
        torch=True,
        env=TORCH_ENV,
    ),
]
