"""numpy arrays through a checkpoint's pickle: data out of band, and views keep sharing their
base (numpy's own pickling would turn each view into an independent copy)."""

from __future__ import annotations

import mmap
import pickle
from pathlib import Path
from typing import Any

import pytest

np = pytest.importorskip("numpy")

from portal.capture._plugins import load_reducers  # noqa: E402
from portal.capture.image import CheckpointImage, Header, InterpreterInfo, read_image, write_image  # noqa: E402
from portal.capture.pickler import dumps, resolve_reducers  # noqa: E402


def roundtrip(obj: Any, path: Path) -> tuple[Any, int]:
    """Through a checkpoint file, as a resume reads it; returns the object and buffer count."""
    data, buffers, _ = dumps(obj, namespaces={}, reducers=resolve_reducers(load_reducers()))
    header = Header(
        interpreter=InterpreterInfo.current(), script="s.py", argv=[], cwd="/", created=0
    )
    write_image(CheckpointImage(header=header, pickle=data, buffers=buffers), path)
    image = read_image(path)
    return pickle.loads(image.pickle, buffers=image.buffers), len(buffers)


def _family() -> dict[str, Any]:
    root = np.arange(24.0)
    grid = root.reshape(4, 6)
    fortran = np.asfortranarray(np.arange(12).reshape(3, 4))
    frozen = root[2:5]
    frozen.flags.writeable = False
    return {
        "root": root,
        "grid": grid,
        "reversed": grid[::-1, 1::2],
        "column": grid[:, 3],
        "fortran": fortran,
        "fview": fortran[1:, :2],
        "frozen": frozen,
        "bytes": root.view(np.uint8)[8:16],
    }


def test_views_share_their_base_after_one_and_two_checkpoints(tmp_path: Path) -> None:
    family = _family()
    for round_ in range(2):  # a resumed array views the checkpoint's bytes: still shared
        back, nbuffers = roundtrip(family, tmp_path / f"{round_}.portal")
        assert nbuffers == 2  # one per root, none per view
        for name, value in family.items():
            assert back[name].dtype == value.dtype and np.array_equal(back[name], value), name
            assert back[name].strides == value.strides, name
        assert not back["frozen"].flags.writeable and back["root"].flags.writeable
        back["root"][13] = -7.0
        assert back["grid"][2, 1] == -7.0 and back["reversed"][1, 0] == -7.0
        back["fortran"][2, 1] = 99
        assert back["fview"][1, 1] == 99
        assert back["bytes"].tobytes() == back["root"][1:2].tobytes()
        family = back


def test_arrays_of_other_owners_pickle_as_numpy_pickles_them(tmp_path: Path) -> None:
    blob = bytearray(np.arange(4, dtype=np.int32).tobytes())
    foreign = np.frombuffer(blob, dtype=np.int32)[1:]
    objects = np.array([{"a": 1}, None], dtype=object)
    back, _ = roundtrip({"foreign": foreign, "objects": objects}, tmp_path / "x.portal")
    assert back["foreign"].tolist() == [1, 2, 3]
    assert back["objects"][0] == {"a": 1}


# -- numpy.memmap -----------------------------------------------------------------------------


def _shard(tmp_path: Path, n: int = 100_000) -> Path:
    path = tmp_path / "shard.bin"
    np.arange(n, dtype=np.uint16).tofile(path)
    return path


def test_a_read_only_map_travels_as_its_mapping_not_its_bytes(tmp_path: Path) -> None:
    """A shard's map (and a strided slice of it) comes back mapping the same file, at the same
    place within its page, with no byte of its data in the checkpoint."""
    path = _shard(tmp_path)
    shard = np.memmap(path, dtype=np.uint16, mode="r", offset=4098 * 2)
    window = shard[10:5000:3]
    back, buffers = roundtrip({"shard": shard, "window": window}, tmp_path / "ck")
    assert buffers == 0  # numpy alone pickled all 200 kB
    for name, original in (("shard", shard), ("window", window)):
        resumed = back[name]
        assert type(resumed) is np.memmap and resumed.filename == original.filename
        assert np.array_equal(resumed, original) and resumed.strides == original.strides
        assert not resumed.flags.writeable
        assert resumed.ctypes.data % mmap.PAGESIZE == original.ctypes.data % mmap.PAGESIZE


@pytest.mark.parametrize("mode", ["r+", "w+"])
def test_a_writable_map_still_writes_to_its_file(tmp_path: Path, mode: str) -> None:
    path = _shard(tmp_path)
    table = np.memmap(path, dtype=np.uint16, mode=mode, shape=(10,))
    table[0] = 777  # flushed at the pause: the file holds it
    back, _ = roundtrip(table, tmp_path / "ck")
    assert back[0] == 777 and back.flags.writeable and back.mode == "r+"
    back[1] = 888
    back.flush()
    assert np.fromfile(path, dtype=np.uint16, count=3).tolist() == [
        777,
        888,
        0 if mode == "w+" else 2,
    ]


def test_a_copy_on_write_map_travels_with_its_changes(tmp_path: Path) -> None:
    path = _shard(tmp_path)
    private = np.memmap(path, dtype=np.uint16, mode="c", shape=(10,))
    private[0] = 5  # in this process's pages only: the file has 0
    back, _ = roundtrip(private, tmp_path / "ck")
    assert back[0] == 5 and back.tolist() == private.tolist()
    assert np.fromfile(path, np.uint16, count=1)[0] == 0


def test_a_file_shorter_at_the_resume_is_refused_naming_it(tmp_path: Path) -> None:
    path = _shard(tmp_path)
    shard = np.memmap(path, dtype=np.uint16, mode="r")
    data, buffers, _ = dumps(shard, namespaces={}, reducers=resolve_reducers(load_reducers()))
    np.arange(10, dtype=np.uint16).tofile(path)
    with pytest.raises(OSError, match=rf"cannot map {path} again .* has 20 bytes"):
        pickle.loads(data, buffers=buffers)
