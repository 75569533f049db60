"""Volumes: from_name, mount, commit, reload across two machines (two mount folders)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import StoreTarget

from portal.storage import (
    FileKeyStore,
    Volume,
    VolumeCorruptError,
    VolumeKeyMissingError,
    VolumeNotFoundError,
)
from portal.storage.errors import StorageError
from portal.storage.volumes import key_id


def test_a_stale_mount_merges_and_deletes_nothing_another_committed(tmp_path: Path) -> None:
    """Issue 41, item 3: mount B, opened before mount A's commit, committed and A's file was
    gone. Now B's commit merges: A's files stay, B's are added, B receives A's; a file both
    changed keeps the last writer's and is named; a file B deleted that A changed stays."""
    url = str(tmp_path / "store")
    first = Volume.from_name("v", create_if_missing=True, url=url)
    root = first.mount(tmp_path / "first")
    (root / "shared.txt").write_text("base")
    (root / "old.txt").write_text("old")
    first.commit()
    a, b = Volume.from_name("v", url=url), Volume.from_name("v", url=url)
    root_a, root_b = a.mount(tmp_path / "a"), b.mount(tmp_path / "b")
    (root_a / "from_a.txt").write_text("a")
    (root_a / "shared.txt").write_text("a's")
    (root_a / "old.txt").write_text("a changed it")
    assert a.commit() == 2 and a.conflicts == []
    (root_b / "from_b.txt").write_text("b")
    (root_b / "shared.txt").write_text("b's")
    (root_b / "old.txt").unlink()
    assert b.commit() == 3
    assert b.conflicts == ["shared.txt"]
    fresh = Volume.from_name("v", url=url).mount(tmp_path / "fresh")
    assert {p.name: p.read_text() for p in fresh.iterdir()} == {
        "from_a.txt": "a",
        "from_b.txt": "b",
        "shared.txt": "b's",
        "old.txt": "a changed it",
    }
    assert (root_b / "from_a.txt").read_text() == "a"  # B received A's file
    (root_b / "from_b.txt").unlink()  # B's next change counts from the merged version
    assert b.commit() == 4 and b.conflicts == []
    assert not (Volume.from_name("v", url=url).mount(tmp_path / "later") / "from_b.txt").exists()


_COMMITTER = """
import json, sys
from pathlib import Path
from portal.storage import Volume

url, options, name, mount = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
vol = Volume.from_name("v", url=url, options=options)
root = vol.mount(mount)
for i in range(int(sys.argv[5])):
    (root / f"{name}-{i}.txt").write_text(f"{name} {i}")
    vol.commit()
"""


def _committer(url: str, options: dict[str, Any], n: int) -> list[str]:
    return [sys.executable, "-c", _COMMITTER, url, json.dumps(options), f"p{n}", f"m{n}"]


@pytest.mark.parametrize("kind", ["file", "s3", "azure"])  # not gcs: its emulator ignores the
def test_processes_committing_at_once_lose_no_file(  # condition (test_storage_backends.py)
    kind: str, tmp_path: Path, target_for: Callable[[str], StoreTarget]
) -> None:
    """Four processes commit a file of their own twelve times each, at once, each from a mount
    that the others' commits make stale: every file of every round is in the last version, and
    the versions are exactly 1 to 48 (no commit replaced another's)."""
    url, options = target_for(kind)
    Volume.from_name("v", create_if_missing=True, url=url, options=options)
    procs = [
        subprocess.Popen(
            [*_committer(url, options, n), "12"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
    last = Volume.from_name("v", url=url, options=options)
    final = last.mount(tmp_path / "final")
    assert last.version == 48
    names = {f"p{n}-{i}.txt": f"p{n} {i}" for n in range(4) for i in range(12)}
    assert {p.name: p.read_text() for p in final.iterdir()} == names


@pytest.mark.parametrize("kind", ["file", "memory", "s3"])
def test_commit_and_reload_between_machines(
    kind: str, tmp_path: Path, target_for: Callable[[str], StoreTarget]
) -> None:
    url, options = target_for(kind)
    with pytest.raises(VolumeNotFoundError) as missing:
        Volume.from_name("ckpts", url=url, options=options)
    assert missing.value.code == "VOLUME_NOT_FOUND"
    assert "create_if_missing=True" in str(missing.value)

    a = Volume.from_name("ckpts", create_if_missing=True, url=url, options=options)
    root_a = a.mount(tmp_path / "a")
    (root_a / "state.pkl").write_bytes(b"step 1")
    (root_a / "sub").mkdir()
    (root_a / "sub" / "log.txt").write_text("hello")
    assert a.commit() == 1

    b = Volume.from_name("ckpts", url=url, options=options)
    root_b = b.mount(tmp_path / "b")
    assert (root_b / "state.pkl").read_bytes() == b"step 1"
    assert (root_b / "sub" / "log.txt").read_text() == "hello"

    (root_a / "state.pkl").write_bytes(b"step 2")
    (root_a / "sub" / "log.txt").unlink()
    assert a.commit() == 2
    assert b.reload() == 2
    assert (root_b / "state.pkl").read_bytes() == b"step 2"
    assert not (root_b / "sub" / "log.txt").exists()


def test_unmounted_and_damaged(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    vol = Volume.from_name("v", create_if_missing=True, url=url)
    with pytest.raises(StorageError, match="not mounted"):
        vol.commit()
    root = vol.mount(tmp_path / "m")
    (root / "f").write_bytes(b"content")
    vol.commit()
    blob = next((tmp_path / "store" / "volumes" / "v" / "blobs").iterdir())
    blob.write_bytes(b"tampered")
    other = Volume.from_name("v", url=url)
    with pytest.raises(VolumeCorruptError, match="damaged"):
        other.mount(tmp_path / "n")


def test_default_url_comes_from_settings(tmp_path: Path) -> None:
    env = {"PORTAL_HOME": str(tmp_path / "home")}
    vol = Volume.from_name("v", create_if_missing=True, environ=env)
    assert vol.url == (tmp_path / "home" / "store").as_uri()


def _manifest_path(tmp_path: Path, name: str = "v") -> Path:
    """The stored manifest of the volume's latest version (what a mount reads)."""
    return max((tmp_path / "store" / "volumes" / name / "versions").iterdir())


def _rewrite(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], *, key: bytes | None
) -> None:
    """Rewrite volume ``v``'s manifest as a bucket writer would: signed with ``key`` (a writer
    holding the volume's key: a machine gone bad), or unsigned (``None``)."""
    path = _manifest_path(tmp_path)
    manifest = json.loads(path.read_bytes())["manifest"]
    change(manifest)
    body = json.dumps(manifest, separators=(",", ":")).encode()
    if key is None:
        path.write_bytes(body)
        return
    mac = hmac.new(key, b"portal volume manifest\0v\0" + body, hashlib.sha256).hexdigest()
    path.write_bytes(b'{"format":2,"manifest":' + body + b',"mac":"' + mac.encode() + b'"}')


def _volume_key(name: str = "v") -> bytes:
    return FileKeyStore(os.environ["PORTAL_HOME"]).get(key_id(name))


def _hostile_manifest(tmp_path: Path, content: bytes, files: dict[str, dict[str, object]]) -> str:
    """Volume ``v`` committed once with ``content``, then its manifest rewritten by a writer who
    holds the volume's key: ``files``, each entry given the real blob's size and hash (the path
    rules hold even then). Returns the store URL."""
    url = str(tmp_path / "store")
    vol = Volume.from_name("v", create_if_missing=True, url=url)
    (vol.mount(tmp_path / "a") / "ok").write_bytes(content)
    vol.commit()
    blob = next((tmp_path / "store" / "volumes" / "v" / "blobs").iterdir())

    def change(manifest: dict[str, Any]) -> None:
        manifest["version"] += 1
        manifest["files"] = {
            rel: {"size": blob.stat().st_size, "sha256": blob.name, **extra}
            for rel, extra in files.items()
        }

    _rewrite(tmp_path, change, key=_volume_key())
    return url


@pytest.mark.parametrize(
    "rel",
    ["../../outside.sh", "/tmp/portal-volume-absolute", "a/../../outside.sh", "./x", "a//b", ""],
)
def test_a_manifest_cannot_write_outside_the_mount(tmp_path: Path, rel: str) -> None:
    setuid = {"mode": 0o4777}
    url = _hostile_manifest(tmp_path, b"#!/bin/sh\necho owned\n", {"fine": setuid, rel: setuid})
    mount = tmp_path / "deep" / "er" / "m"
    victim = Volume.from_name("v", url=url)
    with pytest.raises(VolumeCorruptError, match="outside the mount") as refused:
        victim.mount(mount)
    assert refused.value.details["path"] == rel
    assert not (tmp_path / "deep" / "outside.sh").exists()
    assert not (tmp_path / "outside.sh").exists()
    assert not Path("/tmp/portal-volume-absolute").exists()
    assert not (mount / "fine").exists()  # one bad entry refuses the whole reload


def test_a_manifest_cannot_write_through_a_link_in_the_mount(tmp_path: Path) -> None:
    url = _hostile_manifest(tmp_path, b"data", {"link/evil": {}})
    mount, outside = tmp_path / "m", tmp_path / "outside"
    outside.mkdir()
    mount.mkdir()
    (mount / "link").symlink_to(outside)
    with pytest.raises(VolumeCorruptError, match="symbolic link"):
        Volume.from_name("v", url=url).mount(mount)
    assert list(outside.iterdir()) == []


def test_modes_keep_their_permission_bits_only(tmp_path: Path) -> None:
    setid = {"mode": 0o6755}
    url = _hostile_manifest(tmp_path, b"#!/bin/sh\n", {"tool": setid, "sub/tool": setid})
    root = Volume.from_name("v", url=url).mount(tmp_path / "m")
    for path in (root / "tool", root / "sub" / "tool"):
        assert path.stat().st_mode & 0o7777 == 0o755


# --- the manifest is authenticated ----------------------------------------------------------------


def _committed(tmp_path: Path, name: str = "v") -> tuple[str, Volume]:
    url = str(tmp_path / "store")
    vol = Volume.from_name(name, create_if_missing=True, url=url)
    (vol.mount(tmp_path / f"mount-{name}") / "model.bin").write_bytes(b"weights " + name.encode())
    vol.commit()
    return url, vol


def test_a_manifest_changed_without_the_key_is_refused_before_anything_is_fetched(
    tmp_path: Path,
) -> None:
    """A bucket writer without the key: an unsigned manifest, or one whose code is made up,
    is not used, named, and nothing lands in the mount."""
    url, owner = _committed(tmp_path)

    def add_a_script(manifest: dict[str, Any]) -> None:
        entry = next(iter(manifest["files"].values()))
        manifest["files"]["run.sh"] = {**entry, "mode": 0o755}

    _rewrite(tmp_path, add_a_script, key=None)
    mount = tmp_path / "victim"
    with pytest.raises(VolumeCorruptError, match="carries no code") as unsigned:
        Volume.from_name("v", url=url).mount(mount)
    assert "commit the volume again" in str(unsigned.value)
    assert list(mount.iterdir()) == []

    assert owner.commit() == 2  # the owner's mount commits over it: the way out it was told
    assert Volume.from_name("v", url=url).mount(tmp_path / "fine").joinpath("model.bin").exists()
    _rewrite(tmp_path, add_a_script, key=b"\0" * 32)  # a guessed key
    with pytest.raises(VolumeCorruptError, match="does not verify"):
        Volume.from_name("v", url=url).mount(mount)
    assert list(mount.iterdir()) == []


def test_one_volumes_manifest_is_not_anothers(tmp_path: Path) -> None:
    """Manifests are bound to their volume's name (and key): copying v's over w's is refused."""
    url, _ = _committed(tmp_path, "v")
    _committed(tmp_path, "w")
    _manifest_path(tmp_path, "w").write_bytes(_manifest_path(tmp_path, "v").read_bytes())
    with pytest.raises(VolumeCorruptError, match="does not verify"):
        Volume.from_name("w", url=url).mount(tmp_path / "m")


def test_a_machine_without_the_key_is_told_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = _committed(tmp_path)
    owner_key = Path(os.environ["PORTAL_HOME"]) / "keys" / "volume-v.key"
    another = tmp_path / "another-machine"
    monkeypatch.setenv("PORTAL_HOME", str(another))
    other = Volume.from_name("v", url=url)
    with pytest.raises(VolumeKeyMissingError) as missing:
        other.mount(tmp_path / "m")
    assert missing.value.code == "VOLUME_KEY_MISSING"
    assert "PORTAL_HOME/keys/volume-v.key" in str(missing.value)
    with pytest.raises(VolumeKeyMissingError):  # nor may it commit over the owner's key
        other.commit()
    # With the key copied over, as job keys are, it mounts.
    (another / "keys").mkdir(parents=True, mode=0o700)
    (another / "keys" / "volume-v.key").write_bytes(owner_key.read_bytes())
    (another / "keys" / "volume-v.key").chmod(0o600)
    root = Volume.from_name("v", url=url).mount(tmp_path / "m2")
    assert (root / "model.bin").read_bytes() == b"weights v"
