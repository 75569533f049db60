"""Which modules are the user's own: files under the script's directory, and nothing a library
names with a relative path."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from portal.capture.usercode import UserCode


def test_a_relative_module_file_is_a_librarys_not_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's ``torch.ops`` says its ``__file__`` is "_ops.py": with the job running in the
    script's own directory that path resolves there, yet it is no file of the user's."""
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    helper = tmp_path / "helper.py"
    helper.write_text("X = 1\n")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "_ops.py").write_text("")  # even a file of that name there changes nothing
    synthetic = types.ModuleType("fake_torch_ops")
    synthetic.__file__ = "_ops.py"
    mine = types.ModuleType("helper")
    mine.__file__ = str(helper)
    monkeypatch.setitem(sys.modules, "fake_torch_ops", synthetic)
    monkeypatch.setitem(sys.modules, "helper", mine)

    names = [name for name, _ in UserCode(str(script)).user_modules()]
    assert "helper" in names
    assert "fake_torch_ops" not in names


def test_which_frames_are_carried(tmp_path: Path) -> None:
    """The script's and its libraries' frames are carried (a framework's loop); never Portal's
    own, code without a source file, or the standard library's modules that hold the process's
    own resources while they run."""
    import calendar
    import concurrent.futures.thread
    import json.decoder
    import subprocess

    import portal.capture.engine

    script = tmp_path / "train.py"
    script.write_text("pass\n")
    code = UserCode(str(script))
    assert code.is_carried_file(str(script))
    assert code.is_carried_file(calendar.__file__)
    assert code.is_carried_file(json.decoder.__file__)
    assert code.is_carried_file(pytest.__file__)  # an installed library
    assert not code.is_carried_file(portal.capture.engine.__file__)
    assert not code.is_carried_file("<string>")
    assert not code.is_carried_file("<frozen importlib._bootstrap>")
    assert code.os_bound_module(subprocess.__file__) == "subprocess"
    assert code.os_bound_module(concurrent.futures.thread.__file__) == "concurrent"
    assert not code.is_carried_file(subprocess.__file__)
    assert not code.is_carried_file(concurrent.futures.thread.__file__)
    assert code.os_bound_module(calendar.__file__) is None


def test_portal_at_work_is_its_entry_points_not_what_runs_inside_the_programs_calls(
    tmp_path: Path,
) -> None:
    """A line under the engine or the runtime is Portal at work between two of the program's
    bytecodes (no position of the program's). A line under Portal's import hook is the
    program's own import (torch's, 3 s of it): a pause waits for it as for any frame that
    cannot travel, listening only outside it, where as "Portal at work" every line of the
    import had walked the stack and the notice was abandoned at its deadline."""
    import portal.capture.engine
    import portal.capture.extensions._imports
    import portal.capture.extensions.loops
    import portal.capture.safepoint
    import portal.runtime.launcher

    script = tmp_path / "train.py"
    script.write_text("pass\n")
    code = UserCode(str(script))
    for module in (portal.capture.engine, portal.capture.safepoint, portal.runtime.launcher):
        assert code.is_portal_file(module.__file__), module
    for module in (portal.capture.extensions._imports, portal.capture.extensions.loops):
        assert not code.is_portal_file(module.__file__), module
        assert not code.is_carried_file(module.__file__), module  # never carried, still
        assert code.is_portal_source(module.__file__), module
