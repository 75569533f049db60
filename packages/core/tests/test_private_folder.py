"""Private folders under the shared temporary folder: made 0700, refused when another user made
them first, when a link stands there, or when others may enter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from portal.core.errors import UnsafeFolderError
from portal.core.private import private_folder


def test_made_private_and_used_again(tmp_path: Path) -> None:
    folder = private_folder(tmp_path / "portal-1", "sockets")
    assert folder.is_dir() and folder.stat().st_mode & 0o777 == 0o700
    assert private_folder(folder, "sockets") == folder


def test_a_folder_open_to_others_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "portal-1"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    with pytest.raises(UnsafeFolderError, match=r"mode 755.*Remove it") as refused:
        private_folder(folder, "the runtime's control sockets")
    assert refused.value.code == "UNSAFE_FOLDER"


def test_a_link_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "portal-1").symlink_to(target)
    with pytest.raises(UnsafeFolderError, match="not a folder"):
        private_folder(tmp_path / "portal-1", "sockets")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")
def test_another_users_folder_is_refused(tmp_path: Path) -> None:
    """Another user (``nobody``) created the folder first, even with mode 0700."""
    folder = tmp_path / "portal-1"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    with pytest.raises(UnsafeFolderError, match="belongs to user id 65534"):
        private_folder(folder, "sockets")
