"""Volume mounts without root: each container's private mount table (``bladekit._namespace``).

Checked with real containers (``/ckpt`` is used inside and never appears on this machine; a
folder already at a mount path is hidden inside, never touched), with the fallback to real
folders (``BLADEKIT_MOUNTS=direct``), and, where this test runs as root, as an ordinary user
(``nobody``, through ``setpriv``) to show the mechanism needs no privilege.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import bladekit
from bladekit import _namespace, mounts

app = bladekit.app("namespace-tests")
SRC = Path(bladekit.__file__).parent.parent

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces")


def _namespaces_work() -> bool:
    with tempfile.TemporaryDirectory() as folder:
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import bladekit._namespace as n, pathlib, sys; d = pathlib.Path(sys.argv[1]);"
                "n.enter([('/bladekit-probe', d / 'v')], scratch=d / 'root')",
                folder,
            ],
            capture_output=True,
        )
    return probe.returncode == 0


needs_namespaces = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and _namespaces_work()),
    reason="this machine refuses mount namespaces (bladekit falls back to real folders)",
)


@needs_namespaces
def test_ckpt_inside_the_container_only(portal_home: Path) -> None:
    vol = bladekit.Volume.from_name("ns1", create_if_missing=True)

    @app.function(volumes={"/ckpt": vol})
    def write(text: str) -> tuple[list[str], str]:
        seen = sorted(os.listdir("/ckpt"))
        Path("/ckpt/state.txt").write_text(text)
        vol.commit()
        return seen, os.getcwd()

    had_ckpt = Path("/ckpt").exists()
    assert write.remote("one") == ([], os.getcwd())  # the working folder is kept
    assert write.remote("two") == (["state.txt"], os.getcwd())
    assert Path("/ckpt").exists() == had_ckpt  # nothing made on this machine
    # Each attempt's folder is removed when it ends; only the volume keeps the data.
    assert not any((portal_home / "bladekit" / "mounts").rglob("state.txt"))


@needs_namespaces
def test_a_folder_already_at_the_path_is_hidden_not_touched(tmp_path: Path) -> None:
    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    vol = bladekit.Volume.from_name("ns2", create_if_missing=True)

    @app.function(volumes={str(folder): vol})
    def look() -> list[str]:
        Path(folder, "new.txt").write_text("volume's")
        return sorted(os.listdir(folder))

    assert look.remote() == ["new.txt"]
    assert sorted(os.listdir(folder)) == ["keep.txt"]
    assert (folder / "keep.txt").read_text() == "mine"


def test_direct_mode_still_uses_real_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(mounts.MOUNT_MODE_ENV, "direct")
    vol = bladekit.Volume.from_name("ns3", create_if_missing=True)
    mount = tmp_path / "real" / "data"

    @app.function(volumes={str(mount): vol})
    def where() -> bool:
        return Path(mount).is_dir()

    assert where.remote() is True
    assert not mount.exists()  # released after the attempt, as before
    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")

    @app.function(volumes={str(folder): vol})
    def refused() -> None: ...

    with pytest.raises(mounts.MountError, match="did not put there"):
        refused.remote()
    assert (folder / "keep.txt").read_text() == "mine"


def test_a_bad_mode_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mounts.MOUNT_MODE_ENV, "chroot")
    with pytest.raises(mounts.MountError, match="BLADEKIT_MOUNTS='chroot' is not valid"):
        mounts.mode()


@linux_only
def test_a_threaded_process_is_told_why() -> None:
    import threading

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        with pytest.raises(_namespace.NamespaceUnavailable, match="single-threaded"):
            _namespace.enter([("/x", Path("/nonexistent"))], scratch=Path("/nonexistent"))
    finally:
        stop.set()
        thread.join()


_AS_USER = """
import os, sys, pathlib
from bladekit import _namespace
base = pathlib.Path(sys.argv[1])
_namespace.enter(
    [("/ckpt", base / "vol-root"), (str(base / "existing" / "mnt" / "data"), base / "vol-deep")],
    scratch=base / "scratch",
)
pathlib.Path("/ckpt/a.txt").write_text("root-level")
pathlib.Path(base / "existing" / "mnt" / "data" / "b.txt").write_text("deep")
print(os.getuid(), sorted(os.listdir(base / "existing")))
"""


@linux_only
@pytest.mark.skipif(
    not (hasattr(os, "getuid") and os.getuid() == 0 and shutil.which("setpriv")),
    reason="needs root to switch to an ordinary user for the test (setpriv)",
)
def test_an_ordinary_user_mounts_without_privilege() -> None:
    python = "/usr/bin/python3"
    if not Path(python).exists():
        pytest.skip("no system python3 an ordinary user may run")
    base = Path(tempfile.mkdtemp(prefix="bladekit-nobody-"))
    try:
        (base / "existing").mkdir()
        (base / "existing" / "sibling.txt").write_text("stays visible")
        os.chown(base, 65534, 65534)
        os.chown(base / "existing", 65534, 65534)
        base.chmod(0o755)
        done = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                python,
                "-c",
                _AS_USER,
                str(base),
            ],
            env={"PYTHONPATH": str(SRC), "PATH": os.environ.get("PATH", "")},
            capture_output=True,
            text=True,
            timeout=60,
        )
        if "cannot make a private mount namespace" in done.stderr:
            pytest.skip(f"user namespaces are refused here: {done.stderr.strip()[-200:]}")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split(maxsplit=1)[0] == "65534"  # still that user, not root
        assert "mnt" in done.stdout and "sibling.txt" in done.stdout
        assert (base / "vol-root" / "a.txt").read_text() == "root-level"
        assert (base / "vol-deep" / "b.txt").read_text() == "deep"
        assert not (base / "existing" / "mnt").exists()  # made only inside
        assert not Path("/ckpt/a.txt").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)
