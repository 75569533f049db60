"""Volumes in containers: mounted at the named path, durable only once committed."""

from __future__ import annotations

from pathlib import Path

import pytest

import bladekit
from bladekit import mounts

app = bladekit.app("volume-tests")


def test_handle_pickles_as_name_and_store(portal_home: Path) -> None:
    import pickle

    vol = bladekit.Volume.from_name("v1", create_if_missing=True)
    copy = pickle.loads(pickle.dumps(vol))
    assert copy == vol and copy.url == (portal_home / "store").as_uri()
    with pytest.raises(Exception, match="not mounted in this process"):
        copy.commit()


def test_missing_volume_is_refused_where_it_is_named() -> None:
    with pytest.raises(Exception, match="create_if_missing=True") as info:
        bladekit.Volume.from_name("nope")
    assert getattr(info.value, "code", "") == "VOLUME_NOT_FOUND"


def test_only_committed_writes_reach_the_next_container(tmp_path: Path) -> None:
    vol = bladekit.Volume.from_name("v2", create_if_missing=True)
    mount = str(tmp_path / "mnt" / "data")

    @app.function(volumes={mount: vol})
    def write(name: str, commit: bool) -> list[str]:
        import os

        seen = sorted(os.listdir(mount))
        with open(os.path.join(mount, name), "w") as f:
            f.write(name)
        if commit:
            vol.commit()
        return seen

    assert write.remote("a", True) == []
    assert write.remote("b", False) == ["a"]
    assert write.remote("c", True) == ["a"]  # b was never committed: gone with its container
    assert not Path(mount).exists()  # each attempt's mount is removed when it ends


def test_a_foreign_non_empty_folder_is_never_synced_over(tmp_path: Path) -> None:
    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    with pytest.raises(mounts.MountError, match="did not put there"):
        mounts.acquire(str(folder), "v3")
    assert (folder / "keep.txt").read_text() == "mine"
