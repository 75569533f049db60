"""``save_checkpoint`` / ``load_checkpoint``: the idempotent-resume primitives.

A checkpoint is written to a temporary file in the same folder, flushed and fsynced, then renamed
over the target (and the folder fsynced), so a reader sees the old checkpoint or the new one and
never a torn file, even when the container is killed halfway through a write at the end of its
grace window. Durability beyond this machine is the Volume's job (``volume.commit()``), not this
helper's.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import time
from pathlib import Path
from typing import Any

import cloudpickle

from bladekit.records import record_checkpoint, record_resume
from portal.storage.volumes import TEMP_MARK

__all__ = ["load_checkpoint", "save_checkpoint"]

# portal-storage's Volume leaves out of a commit every file whose name contains this marker.
_VOLUME_SKIPS = TEMP_MARK


def save_checkpoint(obj: Any, path: str | os.PathLike[str]) -> None:
    """Serialize ``obj`` with cloudpickle to ``path``, atomically (temp file, fsync, rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Pickle first: an unpicklable object must not leave a temp file or touch the old checkpoint.
    data = cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    # The marker in the name makes a Volume's commit skip a temp file a kill left behind.
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}{_VOLUME_SKIPS}", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)
    # In a container, tell the run (``bladekit.listing`` shows the last checkpoint's size and time).
    record_checkpoint(target.absolute(), len(data), time.time())


def load_checkpoint(path: str | os.PathLike[str], default: Any | None = None) -> Any:
    """The object saved at ``path``, or ``default`` when no checkpoint exists there yet.

    This *unpickles* the file, and unpickling runs code: whoever can write ``path`` (or the
    volume or bucket it lives in) can run code as this program. Load only checkpoints that your
    own job wrote to storage that only you can write. In a volume they are authenticated: its
    manifest carries an HMAC under the volume's key (kept in your key store, never in the
    bucket), each file is checked against the SHA-256 the manifest records, and a manifest that
    does not verify is refused before anything is mounted, so a writer of the bucket who does
    not hold the key cannot change what you load. (They can put back an older, genuine version.)"""
    try:
        with open(path, "rb") as f:
            value = pickle.load(f)
    except FileNotFoundError:
        return default
    # In a container's second attempt or later: the run resumed (``bladekit.listing`` counts it).
    record_resume()
    return value


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (a crash after rename could otherwise lose it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open folders; the rename is still atomic there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
