"""The working-directory extension's parts: what a scan carries and leaves out, the size note,
the out-of-band buffers, and the checks that refuse an entry leading outside the directory."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from portal.capture.extensions import workdir
from portal.capture.extensions.workdir import (
    OUT_OF_BAND_BYTES,
    UnsafeWorkdirEntryError,
    WorkdirEntry,
    WorkdirFiles,
    WorkdirState,
    restore_files,
    scan,
)
from portal.capture.pickler import dumps


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "job"
    (root / "data" / "sub").mkdir(parents=True)
    (root / "logs").mkdir()
    (root / "__pycache__").mkdir()
    (root / "train.py").write_text("print('hi')\n")
    (root / "data" / "big.bin").write_bytes(b"\x01" * (OUT_OF_BAND_BYTES + 5))
    (root / "data" / "sub" / "small.txt").write_text("small")
    (root / "logs" / "run.log").write_text("a log\n")
    (root / "keep.log").write_text("kept\n")
    (root / "job.portal").write_bytes(b"an old checkpoint")
    (root / "__pycache__" / "x.pyc").write_bytes(b"pyc")
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / ".venv" / "lib" / "pkg.py").write_text("installed = True\n")
    (root / ".portalignore").write_text("logs/\n*.log\n!keep.log\n")
    os.symlink("data/sub/small.txt", root / "inside")
    os.symlink(str(root / "train.py"), root / "absolute_inside")
    os.symlink(str(tmp_path), root / "outside")
    os.symlink("../..", root / "data" / "up")
    monkeypatch.chdir(root / "data")
    workdir.set_job_root(str(root))
    yield root
    workdir._ROOT.clear()


def test_a_scan_carries_the_directory_less_what_is_ignored(tree: Path) -> None:
    files, report = scan(str(tree))
    kinds = {e.path: (e.kind, e.data if e.kind == "l" else None) for e in files.entries}
    assert kinds == {
        ".portalignore": ("f", None),
        "absolute_inside": ("l", "train.py"),
        "data": ("d", None),
        "data/big.bin": ("f", None),
        "data/sub": ("d", None),
        "data/sub/small.txt": ("f", None),
        "inside": ("l", "data/sub/small.txt"),
        "keep.log": ("f", None),
        "train.py": ("f", None),
    }
    assert files.cwd == "data"
    assert sorted(report.outside_links) == ["data/up", "outside"]
    assert report.biggest[0] == ("data/big.bin", OUT_OF_BAND_BYTES + 5)
    assert report.files == 5
    big = next(e for e in files.entries if e.path == "data/big.bin")
    assert isinstance(big.data, pickle.PickleBuffer)  # mapped, not read


def test_large_files_travel_out_of_band(tree: Path) -> None:
    files, _ = scan(str(tree))
    data, buffers, _ = dumps(files, namespaces={})
    assert [bytes(b) for b in buffers] == [b"\x01" * (OUT_OF_BAND_BYTES + 5)]
    assert b"\x01" * 1000 not in data
    back = pickle.loads(data, buffers=buffers)
    assert bytes(next(e for e in back.entries if e.path == "data/big.bin").data)[:3] == b"\x01" * 3


def test_a_large_directory_gets_one_note_naming_the_way_out(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = WorkdirState(warn_bytes=1000)
    state.capture()
    state.capture()
    err = capsys.readouterr().err
    assert err.count("portal: note: the working directory") == 1
    assert "data/big.bin 65.5 kB" in err and str(tree / ".portalignore") in err
    assert "lead outside the working directory and are not carried" in err
    assert "data/up, outside" in err or "outside, data/up" in err


def test_restored_in_another_directory_with_the_same_contents(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = WorkdirState()
    captured = state.capture()
    data, buffers, _ = dumps(captured, namespaces={})
    image = pickle.loads(data, buffers=buffers)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    monkeypatch.chdir(fresh)
    workdir.set_job_root(str(fresh))
    state.restore(image)
    assert Path.cwd() == fresh / "data"  # the program's subdirectory, in the new place
    assert (fresh / "data" / "big.bin").read_bytes() == (tree / "data" / "big.bin").read_bytes()
    assert os.readlink(fresh / "absolute_inside") == "train.py"
    assert (fresh / "inside").read_text() == "small"
    assert not (fresh / "logs").exists() and not (fresh / "outside").exists()
    assert (fresh / "train.py").stat().st_mtime_ns == (tree / "train.py").stat().st_mtime_ns
    state.restore(image)  # again, over itself: unchanged files are left alone
    assert workdir.relocate(str(tree / "logs" / "run.log")) == str(fresh / "logs" / "run.log")
    assert workdir.relocate("/var/log/other.log") == "/var/log/other.log"
    workdir._MOVED.clear()
    assert (fresh / "keep.log").read_text() == "kept\n"


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        (WorkdirEntry("../escape.txt", "f", 0o644, 0, b"x"), "'../escape.txt'"),
        (WorkdirEntry("/tmp/abs.txt", "f", 0o644, 0, b"x"), "'/tmp/abs.txt'"),
        (WorkdirEntry("a/../../x", "f", 0o644, 0, b"x"), "'a/../../x'"),
        (WorkdirEntry("", "f", 0o644, 0, b"x"), "''"),
        (WorkdirEntry("link", "l", 0, 0, "../../etc/passwd"), "'link'"),
        (WorkdirEntry("link", "l", 0, 0, "/etc/passwd"), "'link'"),
        (WorkdirEntry("dev", "c", 0, 0, None), "'dev'"),
    ],
)
def test_an_entry_leading_outside_is_refused_before_anything_is_written(
    tmp_path: Path, entry: WorkdirEntry, named: str
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    good = WorkdirEntry("good.txt", "f", 0o644, 0, b"fine")
    with pytest.raises(UnsafeWorkdirEntryError, match="writes nothing outside") as caught:
        restore_files(str(root), WorkdirFiles([good, entry], None))
    assert named in caught.value.message
    assert list(root.iterdir()) == []
    assert not (tmp_path / "escape.txt").exists()


def test_writing_through_an_existing_link_that_leads_out_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    os.symlink(outside, root / "data")
    files = WorkdirFiles([WorkdirEntry("data/x.txt", "f", 0o644, 0, b"x")], None)
    with pytest.raises(UnsafeWorkdirEntryError, match=r"'data/x\.txt'.*through a link"):
        restore_files(str(root), files)
    assert list(outside.iterdir()) == []


def test_an_existing_link_in_place_of_a_file_is_replaced_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    victim = root / "victim.txt"
    victim.write_text("untouched")
    os.symlink("victim.txt", root / "out.txt")
    restore_files(str(root), WorkdirFiles([WorkdirEntry("out.txt", "f", 0o600, 0, b"new")], None))
    assert not (root / "out.txt").is_symlink() and (root / "out.txt").read_bytes() == b"new"
    assert victim.read_text() == "untouched"


def test_a_changed_file_held_open_elsewhere_is_not_rolled_back(tmp_path: Path) -> None:
    """A shell's ``> out.txt`` of the resumed runtime (or any other writer) keeps its file: a
    restore that replaced it would leave that writer writing into a file nobody sees."""
    import subprocess
    import time

    from portal.capture.notes import restore_notes

    root = tmp_path / "job"
    root.mkdir()
    (root / "out.txt").write_text("before the pause\n")
    (root / "results.txt").write_text("at the pause\n")
    files, _ = scan(str(root))
    (root / "results.txt").write_text("written after the checkpoint by the lost attempt\n")
    with open(root / "out.txt", "w") as out:  # the redirect truncates it, then a writer writes
        writer = subprocess.Popen(
            ["sh", "-c", "echo resumed output; sleep 30"], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 10
        while (root / "out.txt").read_text() == "" and time.monotonic() < deadline:
            time.sleep(0.01)
        restore_files(str(root), files)
        assert (root / "out.txt").read_text() == "resumed output\n"
        assert (root / "results.txt").read_text() == "at the pause\n"  # nobody holds it
        assert any(
            "out.txt in the working directory was left as it is" in n for n in restore_notes()
        )
    finally:
        writer.kill()
        writer.wait()


def test_portal_home_and_a_local_store_inside_the_directory_never_travel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project-local PORTAL_HOME (and its store): a resume must not roll the job's own
    records back with the program's files, nor carry them at all."""
    root = tmp_path / "job"
    (root / ".portal" / "jobs" / "j-1").mkdir(parents=True)
    (root / ".portal" / "portal.db").write_bytes(b"attempts 1, 2")
    (root / "ckpts" / "jobs").mkdir(parents=True)
    (root / "ckpts" / "jobs" / "chunk").write_bytes(b"stored")
    (root / "results.txt").write_text("the program's\n")
    (root / ".portalish").write_text("not Portal's: a name that only starts the same\n")
    monkeypatch.setenv("PORTAL_HOME", str(root / ".portal"))
    monkeypatch.setenv("PORTAL_STORAGE_URL", (root / "ckpts").as_uri())
    monkeypatch.chdir(root)
    assert set(workdir.portal_folders(str(root))) == {".portal", "ckpts"}
    files, _ = scan(str(root))
    assert sorted(e.path for e in files.entries) == [".portalish", "results.txt"]

    # An older checkpoint that carried them: the restore leaves the home as it is now.
    old = WorkdirFiles(
        [
            WorkdirEntry(".portal", "d", 0o700, 0, None),
            WorkdirEntry(".portal/portal.db", "f", 0o600, 0, b"attempts 1"),
            WorkdirEntry("results.txt", "f", 0o644, 0, b"older\n"),
        ],
        ".",
        str(root),
    )
    restore_files(str(root), old)
    assert (root / ".portal" / "portal.db").read_bytes() == b"attempts 1, 2"
    assert (root / "results.txt").read_text() == "older\n"
