"""Volumes: from_name, mount, commit, reload across two machines (two mount folders)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import StoreTarget

from portal.storage import Volume, VolumeCorruptError, VolumeNotFoundError
from portal.storage.errors import StorageError


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


def _hostile_manifest(tmp_path: Path, content: bytes, files: dict[str, dict[str, object]]) -> str:
    """Volume ``v`` committed once with ``content``, then its manifest rewritten by a bucket
    writer: ``files``, each entry given the real blob's size and hash. Returns the store URL."""
    import json

    url = str(tmp_path / "store")
    vol = Volume.from_name("v", create_if_missing=True, url=url)
    (vol.mount(tmp_path / "a") / "ok").write_bytes(content)
    vol.commit()
    blob = next((tmp_path / "store" / "volumes" / "v" / "blobs").iterdir())
    path = tmp_path / "store" / "volumes" / "v" / "manifest"
    manifest = json.loads(path.read_bytes())
    manifest["version"] += 1
    manifest["files"] = {
        rel: {"size": blob.stat().st_size, "sha256": blob.name, **extra}
        for rel, extra in files.items()
    }
    path.write_text(json.dumps(manifest))
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
