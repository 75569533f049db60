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


def _hostile_manifest(store: Path, files: dict[str, dict[str, object]]) -> None:
    """A bucket writer's manifest for volume ``v``: its own entries, pointing at a real blob."""
    import json

    path = store / "volumes" / "v" / "manifest"
    manifest = json.loads(path.read_bytes())
    manifest["version"] += 1
    manifest["files"] = files
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "rel",
    ["../../outside.sh", "/tmp/portal-volume-absolute", "a/../../outside.sh", "./x", "a//b", ""],
)
def test_a_manifest_cannot_write_outside_the_mount(tmp_path: Path, rel: str) -> None:
    url = str(tmp_path / "store")
    vol = Volume.from_name("v", create_if_missing=True, url=url)
    (vol.mount(tmp_path / "a") / "ok").write_bytes(b"#!/bin/sh\necho owned\n")
    vol.commit()
    blob = next((tmp_path / "store" / "volumes" / "v" / "blobs").iterdir())
    entry = {"size": blob.stat().st_size, "sha256": blob.name, "mode": 0o4777}
    _hostile_manifest(tmp_path / "store", {"fine": entry, rel: entry})
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
    url = str(tmp_path / "store")
    vol = Volume.from_name("v", create_if_missing=True, url=url)
    (vol.mount(tmp_path / "a") / "ok").write_bytes(b"data")
    vol.commit()
    blob = next((tmp_path / "store" / "volumes" / "v" / "blobs").iterdir())
    entry = {"size": blob.stat().st_size, "sha256": blob.name}
    mount, outside = tmp_path / "m", tmp_path / "outside"
    outside.mkdir()
    mount.mkdir()
    (mount / "link").symlink_to(outside)
    _hostile_manifest(tmp_path / "store", {"link/evil": entry})
    with pytest.raises(VolumeCorruptError, match="symbolic link"):
        Volume.from_name("v", url=url).mount(mount)
    assert list(outside.iterdir()) == []


def test_modes_keep_their_permission_bits_only(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    vol = Volume.from_name("v", create_if_missing=True, url=url)
    (vol.mount(tmp_path / "a") / "tool").write_bytes(b"#!/bin/sh\n")
    vol.commit()
    blob = next((tmp_path / "store" / "volumes" / "v" / "blobs").iterdir())
    entry = {"size": blob.stat().st_size, "sha256": blob.name, "mode": 0o6755}
    _hostile_manifest(tmp_path / "store", {"tool": entry, "sub/tool": entry})
    root = Volume.from_name("v", url=url).mount(tmp_path / "m")
    for path in (root / "tool", root / "sub" / "tool"):
        assert path.stat().st_mode & 0o7777 == 0o755
