"""Portal's task runner: tests per package and Python, integration, lint, typecheck, benchmarks.

``nox`` runs the default sessions (what CI runs); ``nox -s bench`` runs the opt-in benchmarks;
``nox -l`` lists everything. Virtual environments are made with uv (fast on 2 cores).
"""

from __future__ import annotations

import os
import re
import shutil
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYTHONS = ["3.11", "3.12", "3.13"]
PACKAGES = [
    name
    for name in (
        "core",
        "testing",
        "capture",
        "storage",
        "providers-base",
        "providers-aws",
        "providers-gcp",
        "providers-azure",
        "policies",
        "portal",
        "console",
        "server",
        "ray",
        "bladekit",
    )
    if (ROOT / "packages" / name / "pyproject.toml").exists()
]
#: Packages whose tests are end to end (real nodes, clusters, browsers) and slow: they run on the
#: oldest and newest Python, which bound what the middle one does; ``capture`` and the libraries
#: under them run on all three (``capture`` is where the interpreter versions differ). Ray's
#: cluster tests run once: its wheels and its own interpreter support are Ray's to keep.
#: ``PORTAL_ALL_PYTHONS=1`` runs every package on every Python.
SLOW_PACKAGE_PYTHONS = {
    "portal": ("3.11", "3.13"),
    "console": ("3.11", "3.13"),
    "server": ("3.11", "3.13"),
    "ray": ("3.11",),
}
#: Packages whose tests run in several processes at once (pytest-xdist), and how many. Portal's
#: tests mostly wait (on a job's pause, an upload, a resumed process), so three share the two
#: cores well (its suite took 21 of CI's 78 minutes alone, 7.5 with three); capture's mostly
#: compute, so two. ``PORTAL_TEST_WORKERS=N`` sets every package's count (1: one process, as
#: before), e.g. to bisect a test that fails only beside others.
TEST_WORKERS = {"portal": 3, "capture": 2}
AZURITE_VERSION = "3.35.0"  # 3.36+ need a newer Node than this machine's 20
AZURITE_DIR = ROOT / ".cache" / "azurite"

# pyenv shims resolve python3.12/python3.13 only when these versions are selected.
os.environ.setdefault("PYENV_VERSION", "3.11.7:3.12.1:3.13.0")

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "typecheck", "tests", "integration"]
nox.options.error_on_missing_interpreters = True


def _package_dir(package: str) -> Path:
    return ROOT / "packages" / package


def _distribution(package: str) -> str:
    """The distribution name a package folder publishes (``portal`` -> ``portal-spot``: the
    plain names are other projects' on the package index)."""
    project = tomllib.loads((_package_dir(package) / "pyproject.toml").read_text())["project"]
    return str(project["name"])


def _has_tests(path: Path) -> bool:
    return any(path.rglob("test_*.py"))


def _workspace_deps(package: str) -> list[str]:
    """The workspace packages ``package`` depends on, transitively (installed editable)."""
    folders = {_distribution(p): p for p in PACKAGES}
    found: list[str] = []
    todo = [package]
    while todo:
        meta = tomllib.loads((_package_dir(todo.pop()) / "pyproject.toml").read_text())
        project = meta["project"]
        extras = project.get("optional-dependencies", {}).values()
        for requirement in [*project.get("dependencies", []), *(r for e in extras for r in e)]:
            name = re.split(r"[ <>=!~;\[]", requirement, maxsplit=1)[0]
            folder = folders.get(name)
            if folder is not None and folder not in found and folder != package:
                found.append(folder)
                todo.append(folder)
    return found


def _extras(package: str) -> str:
    """Every extra the package declares (its tests exercise them all: clouds, testing tools)."""
    meta = tomllib.loads((_package_dir(package) / "pyproject.toml").read_text())
    extras = sorted(meta["project"].get("optional-dependencies", {}))
    return f"[{','.join(extras)}]" if extras else ""


def _ensure_azurite(session: nox.Session) -> None:
    """Install the Azure Blob emulator (npm) once, into .cache/azurite; tests find it there."""
    binary = AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"
    if not binary.exists():
        AZURITE_DIR.mkdir(parents=True, exist_ok=True)
        session.run(
            "npm",
            "install",
            "--prefix",
            str(AZURITE_DIR),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "--save-exact",
            f"azurite@{AZURITE_VERSION}",
            external=True,
        )
    session.env["PORTAL_AZURITE_BIN"] = str(binary)


@nox.session(python=PYTHONS)
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """One package's own tests, with only that package (and what it needs) installed."""
    pkg = _package_dir(package)
    if not _has_tests(pkg / "tests"):
        session.skip(f"{package} has no tests yet")
    pythons = SLOW_PACKAGE_PYTHONS.get(package, PYTHONS)
    if session.python not in pythons and os.environ.get("PORTAL_ALL_PYTHONS") != "1":
        session.skip(f"{package}'s end-to-end tests run on Python {' and '.join(pythons)}")
    selection = []
    if session.python != pythons[0] and os.environ.get("PORTAL_ALL_PYTHONS") != "1":
        selection = ["-m", "not one_python"]  # see the marker in pyproject.toml
    install = ["-e", f"{pkg}{_extras(package)}"]
    for dependency in _workspace_deps(package):
        install += ["-e", str(_package_dir(dependency))]
    session.install(*install, "pytest>=8", "hypothesis>=6.100", "pytest-xdist>=3.5")
    if package in ("capture", "portal"):  # portal: the multi-process jobs end to end
        torch_installed = _install_local_torch(session)
        if package == "capture" and torch_installed:
            # After torch, so their `torch>=...` is met by the CPU build already there.
            session.install(*FRAMEWORK_PINS)
    if package == "storage":
        _ensure_azurite(session)
    if package != "storage":  # whose emulator tests set their own endpoints and variables
        # The tests reach 127.0.0.1 only: a cloud SDK that a test did not point at an emulator
        # (an EC2 call for an instance type no catalog knows, a credential chain's last resort)
        # asks a closed loopback port, never a cloud endpoint or the metadata address.
        session.env.update(
            AWS_ENDPOINT_URL="http://127.0.0.1:9",
            AWS_EC2_METADATA_DISABLED="true",
            NO_GCE_CHECK="True",
            # MLflow's usage telemetry would post to its collector from any test importing it.
            MLFLOW_DISABLE_TELEMETRY="true",
            DO_NOT_TRACK="true",
        )
    session.run(
        "pytest",
        str(pkg / "tests"),
        "-p",
        "no:cacheprovider",
        "-q",
        "--durations=8",  # the slowest tests in CI's log: what to trim when CI nears its hour
        *selection,
        *_workers(package),
        "--rootdir",
        str(ROOT),
        "-c",
        str(ROOT / "pyproject.toml"),
        *session.posargs,
    )


def _workers(package: str) -> list[str]:
    """pytest-xdist's options for ``package``: its :data:`TEST_WORKERS` processes, each taking
    the next test as it finishes one (``worksteal``: the suites mix 1 s and 50 s tests)."""
    count = int(os.environ.get("PORTAL_TEST_WORKERS") or TEST_WORKERS.get(package, 1))
    return ["-n", str(count), "--dist", "worksteal"] if count > 1 else []


# torch for capture's tensor/loop tests and the tensor benchmark: only the CPU wheel lying on
# this machine's disk, pinned exactly (a plain or ranged `torch` would fetch a multi-GB CUDA
# build). It exists for CPython 3.11 only; elsewhere those tests skip themselves.
TORCH_PIN = "torch==2.13.0"
TORCH_WHEELS = Path(os.environ.get("PORTAL_TORCH_WHEELS", "/opt/wheels"))


#: The training frameworks, event writers and loaders capture's tests pause inside
#: (test_capture_frameworks_real.py, test_capture_writers.py, test_capture_stateful_loaders.py),
#: from the registry. Not an extra of portal-capture: every extra is installed before torch, and
#: these need torch, which must be the local CPU build (they would pull a CUDA one).
FRAMEWORK_PINS = [
    "accelerate==1.16.0",
    "transformers==5.25.0",
    "lightning==2.6.6",
    "tensorboard==2.21.0",
    "tensorboardX==2.6.5",
    "wandb==0.31.0",  # offline only: the tests set WANDB_MODE=offline, no error reporting
    "mlflow-skinny==3.18.0",  # a local store only; telemetry off (the session's environment)
    "torchdata==0.11.0",  # StatefulDataLoader
    "datasets==5.2.0",  # streaming from local files only: the tests set HF_*_OFFLINE
]


def _install_local_torch(session: nox.Session) -> bool:
    """Install the local CPU torch wheel; False where there is none for this Python."""
    # The wheel file itself, never the requirement: an index's torch 2.13.0 is the CUDA build.
    tag = "cp" + str(session.python).replace(".", "")
    wheels = sorted(TORCH_WHEELS.glob(f"torch-2.13.0+cpu-{tag}-*.whl"))
    if not wheels:
        session.log(f"no local {TORCH_PIN} wheel for {session.python} in {TORCH_WHEELS}: skipped")
        return False
    session.install(str(wheels[-1]))
    return True


@nox.session(python=PYTHONS[0])
def integration(session: nox.Session) -> None:
    """Every package built as a wheel and installed together, plus the example plugins."""
    dist = ROOT / "dist" / "integration"
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir(parents=True)
    sources = [ROOT / "packages" / p for p in PACKAGES] + [
        ROOT / "examples" / "portal-acme-notices",
        ROOT / "examples" / "portal-acme-policy",
        ROOT / "examples" / "portal-acme-storage",
    ]
    for src in sources:
        session.run(
            "uv", "build", "--wheel", "--quiet", "--out-dir", str(dist), str(src), external=True
        )
    wheels = sorted(str(w) for w in dist.glob("*.whl"))
    session.install(*wheels, "pytest>=8", "hypothesis>=6.100")
    session.chdir(ROOT / "tests")  # import the installed wheels, not the source tree
    session.run(
        "pytest",
        str(ROOT / "tests"),
        *[str(p) for p in sorted((ROOT / "examples").glob("*/tests"))],  # their contract suites
        "-p",
        "no:cacheprovider",
        "-q",
        "--rootdir",
        str(ROOT),
        "-c",
        str(ROOT / "pyproject.toml"),
        *session.posargs,
    )


@nox.session(python=PYTHONS[0])
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting; deptry: each package declares what its code imports."""
    session.install("ruff>=0.6", "deptry>=0.20")
    session.run("ruff", "check", str(ROOT))
    session.run("ruff", "format", "--check", str(ROOT))
    # deptry sees one `portal` namespace, so the first-party distributions it cannot map to a
    # portion are left to import-linter (typecheck session); fsspec loads s3fs, gcsfs and adlfs
    # by a URL's scheme, and uvicorn uses httptools when present: declared, never imported.
    first_party = [_distribution(p) for p in PACKAGES]
    unimported = [*first_party, "s3fs", "gcsfs", "adlfs", "httptools"]
    for package in PACKAGES:
        with session.chdir(_package_dir(package)):
            session.run(
                "deptry",
                "src",
                "--known-first-party",
                "portal",
                "--known-first-party",
                "bladekit",
                # The commands' first step, a module of portal-spot-core's outside the namespace.
                "--known-first-party",
                "_portal_names",
                "--pep621-dev-dependency-groups",
                "testing,test",
                "--per-rule-ignores",
                # The contract suites (portal.testing) are pytest classes for test suites.
                "DEP002=" + "|".join(unimported) + ",DEP004=pytest",
                # Distributions whose import name is not theirs (deptry runs without them).
                "--package-module-name-map",
                "google-auth=google,azure-identity=azure,nvidia-ml-py=pynvml",
                "--no-ansi",
            )


@nox.session(python=PYTHONS[0])
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every package's source; import-linter holds the architecture (the
    contracts in pyproject.toml: layers, what core and the SDK may import, no cycles)."""
    session.install(
        "mypy>=1.11",
        "import-linter>=2.5",
        "pytest>=8",
        "hypothesis>=6.100",
        "psycopg[binary]>=3.1",  # portal's postgres extra: its types are checked, not ignored
        *("starlette>=0.40", "uvicorn>=0.30", "leather>=0.4"),  # portal-console[web]
        "mcp>=2.3,<3",  # portal-console[mcp]
        *[x for p in PACKAGES for x in ("-e", str(_package_dir(p)))],
    )
    # Every package's src on mypy's path (with the root config's mypy_path): each one's part of
    # the `portal` namespace resolves, whichever packages the config lists.
    session.env["MYPYPATH"] = os.pathsep.join(str(_package_dir(p) / "src") for p in PACKAGES)
    session.run("mypy", *[str(_package_dir(p) / "src") for p in PACKAGES])
    session.run("lint-imports", "--config", str(ROOT / "pyproject.toml"), "--no-cache")


@nox.session(python=PYTHONS[0], default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks (opt-in): each prints ratios against a peer measured in the same run."""
    session.install(*[x for p in PACKAGES for x in ("-e", f"{_package_dir(p)}{_extras(p)}")])
    _install_local_torch(session)
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        session.run("python", str(script), *session.posargs)


@nox.session(python=PYTHONS[0], default=False)
def demo(session: nox.Session) -> None:
    """The demo job: a training script gets a notice partway, is resumed, and ends as if never
    interrupted (compared with an uninterrupted run)."""
    session.install(*[x for p in PACKAGES for x in ("-e", str(_package_dir(p)))])
    session.run("python", str(ROOT / "examples" / "demo" / "run_demo.py"), *session.posargs)
