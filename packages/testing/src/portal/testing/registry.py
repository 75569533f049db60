"""Public programs from the package registry, for tests that need another project's real files.

No third-party code is kept in Portal's repository: a test that needs another project's package
(the other ``portal`` or ``bladekit`` on the index, which own the same import names) downloads its
wheel at test time into a cache outside the repository (``$PORTAL_CORPUS_CACHE``, by default
``~/.cache/portal-test-corpus``), once, and is skipped with the reason when the registry cannot be
reached. The test environments nox makes with uv have no pip, so the tools venv's pip (or one on
PATH) downloads.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

__all__ = ["CACHE", "pip_command", "unpacked_wheel", "wheel"]

CACHE = Path(os.environ.get("PORTAL_CORPUS_CACHE") or Path.home() / ".cache" / "portal-test-corpus")


def pip_command() -> list[str] | None:
    """A pip to download with: this interpreter's, the tools venv's (``.venv-tools`` at the root
    of the checkout this file was installed from, or of the current directory), or PATH's."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    roots = [Path.cwd(), *Path(__file__).resolve().parents]
    candidates = [str(root / ".venv-tools" / "bin" / "pip") for root in roots]
    for candidate in (*candidates, shutil.which("pip3"), shutil.which("pip")):
        if candidate and os.access(candidate, os.X_OK):
            return [candidate]
    return None


def wheel(name: str, version: str) -> Path:
    """The registry's wheel of ``name==version`` (no dependencies), downloaded once into the
    cache; the calling test is skipped, with pip's reason, when it cannot be had."""
    folder = CACHE / f"{name}-{version}-wheel"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two sessions fetching the same wheel wait here
        found = _found(folder, name, version)
        if found is not None:
            return found
        pip = pip_command()
        if pip is None:
            pytest.skip("no pip to download with (this environment, .venv-tools, PATH)")
        done = subprocess.run(
            [
                *pip,
                "download",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--disable-pip-version-check",
                "--no-input",
                "--timeout",
                "30",
                "--retries",
                "1",
                "--dest",
                str(folder),
                f"{name}=={version}",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        found = _found(folder, name, version)
        if done.returncode != 0 or found is None:
            pytest.skip(
                f"cannot download {name}=={version} from the registry: {done.stderr[-300:]}"
            )
        return found


def unpacked_wheel(name: str, version: str, site: Path) -> Path:
    """``name==version``'s wheel laid out in ``site`` as pip lays out a wheel (its packages and
    its ``.dist-info``), so that ``importlib.metadata`` finds it there; returns ``site``."""
    with zipfile.ZipFile(wheel(name, version)) as archive:
        archive.extractall(site)
    return site


def _found(folder: Path, name: str, version: str) -> Path | None:
    stem = name.replace("-", "_")
    found = sorted(folder.glob(f"{stem}-{version}-*.whl"))
    return found[0] if found else None
