"""save_checkpoint / load_checkpoint: atomic, default on first attempt, never torn."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import bladekit


def test_default_until_first_save(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.pkl"
    assert bladekit.load_checkpoint(str(path)) is None
    assert bladekit.load_checkpoint(str(path), default=(0, "fresh")) == (0, "fresh")
    bladekit.save_checkpoint({"step": 3}, str(path))
    assert bladekit.load_checkpoint(str(path), default=None) == {"step": 3}


def test_lambdas_and_local_classes_via_cloudpickle(tmp_path: Path) -> None:
    class Local:
        def __init__(self) -> None:
            self.f = lambda x: x * 2

    bladekit.save_checkpoint(Local(), str(tmp_path / "c.pkl"))
    assert bladekit.load_checkpoint(str(tmp_path / "c.pkl")).f(4) == 8


def test_an_unpicklable_object_leaves_the_old_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "state.pkl"
    bladekit.save_checkpoint(1, str(path))
    with pytest.raises(TypeError):
        bladekit.save_checkpoint(threading.Lock(), str(path))
    assert bladekit.load_checkpoint(str(path)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.pkl"]


def test_readers_never_see_a_torn_file(tmp_path: Path) -> None:
    path = str(tmp_path / "state.pkl")
    big = [bytes(64 * 1024)] * 16
    bladekit.save_checkpoint((0, big), path)
    stop = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        while not stop.is_set():
            try:
                _step, data = bladekit.load_checkpoint(path)
                assert len(data) == 16
            except BaseException as exc:  # pragma: no cover - the failure being tested
                errors.append(exc)
                return

    reader = threading.Thread(target=read)
    reader.start()
    for step in range(1, 40):
        bladekit.save_checkpoint((step, big), path)
    stop.set()
    reader.join()
    assert errors == []
    assert bladekit.load_checkpoint(path)[0] == 39
