"""numpy arrays through a checkpoint's pickle: data out of band, and views keep sharing their
base (numpy's own pickling would turn each view into an independent copy)."""

from __future__ import annotations

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
