"""Private folders under the shared temporary folder: made 0700, refused when another user made
them first or when a link stands there; closed when this user's own is open to others."""

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


def test_this_users_folder_open_to_others_is_closed_and_used(tmp_path: Path) -> None:
    """Issue 41, item 4: a folder of the user's own that is merely too open (a umask) is
    tightened, not refused."""
    folder = tmp_path / "portal-1"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    (folder / "old.sock").write_text("")
    assert private_folder(folder, "the runtime's control sockets") == folder
    assert folder.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")
def test_an_open_folder_another_user_put_something_in_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "portal-1"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    planted = folder / "j-1-1.sock"
    planted.write_text("")
    os.chown(planted, 65534, 65534)
    with pytest.raises(UnsafeFolderError, match=r"mode 777\), and user id 65534 put j-1-1.sock"):
        private_folder(folder, "the runtime's control sockets")
    assert folder.stat().st_mode & 0o777 == 0o777  # left as it was: the user decides


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
