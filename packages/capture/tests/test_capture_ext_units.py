"""The built-in capture extensions in one process: registration through the plugin hooks, the
environment's change sets across resumes on machines that differ, and the reducers that keep the
global generators and logging handlers shared."""

from __future__ import annotations

import logging
import os
import pickle
import random
import socket
import sys
import types
import warnings
from pathlib import Path

import pytest

from portal.capture import plugin
from portal.capture.extensions.environment import EnvironState, SysPathState
from portal.capture.extensions.logging_state import capture_logging, restore_logging
from portal.capture.extensions.settings import WarningRegistries, WarningsState
from portal.capture.pickler import dumps, resolve_reducers
from portal.core.plugins import Plugins, get_plugin_manager


def _roundtrip(value: object) -> object:
    reducers = resolve_reducers(
        {k: v for spec in plugin.portal_serializers() for k, v in spec.reducers.items()}
    )
    data, buffers, _ = dumps(value, namespaces={}, reducers=reducers)
    return pickle.loads(data, buffers=buffers)


def test_registered_through_the_hooks_like_any_plugin() -> None:
    pm = get_plugin_manager(autoload=False)
    pm.register(plugin, name="capture")
    plugins = Plugins(pm)
    extensions = plugins.capture_extensions()
    assert {"random_global", "numpy_random_global", "process_environ", "logging_config"} <= set(
        extensions
    )
    assert extensions["numpy_random_global"].modules == ("numpy.random",)
    assert "random.Random" in plugins.serializers()["capture_rng"].reducers


def test_loading_the_plugin_imports_no_library() -> None:
    """Support for numpy costs nothing to a program that never imported it."""
    import subprocess

    code = (
        "import sys; from portal.capture import plugin; "
        "plugin.portal_capture_extensions(); plugin.portal_serializers(); "
        "print(sorted(m for m in ('numpy', 'torch') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=True)
    assert done.stdout == b"[]\n"


def test_the_entry_point_is_installed() -> None:
    from importlib import metadata

    points = metadata.entry_points(group="portal")
    assert any(ep.value == "portal.capture.plugin" for ep in points)


def test_environ_changes_survive_resumes_on_machines_that_differ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EXT_KEEP", "old-machine")
    monkeypatch.setenv("EXT_GONE", "1")
    monkeypatch.delenv("EXT_NEW", raising=False)
    first = EnvironState()
    os.environ["EXT_NEW"] = "program"
    del os.environ["EXT_GONE"]
    changes = first.capture()
    assert changes == {"EXT_GONE": None, "EXT_NEW": "program"}
    # The new machine: a different EXT_KEEP, and it happens to set EXT_NEW as the program did.
    monkeypatch.setenv("EXT_KEEP", "new-machine")
    monkeypatch.setenv("EXT_GONE", "1")
    second = EnvironState()
    second.restore(changes)
    assert os.environ["EXT_KEEP"] == "new-machine"  # untouched by the program: the new value
    assert "EXT_GONE" not in os.environ and os.environ["EXT_NEW"] == "program"
    # Still the program's changes at the next checkpoint, though they match this machine now.
    assert second.capture() == changes
    del os.environ["EXT_NEW"]
    assert second.capture() == {"EXT_GONE": None, "EXT_NEW": None}


def test_sys_path_keeps_the_programs_entries_around_the_new_interpreters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "path", ["/script", "/old/lib", "/old/site", "/old/extra"])
    old = SysPathState()
    sys.path.insert(0, "/front")
    sys.path.append("/back")
    sys.path.remove("/old/extra")
    state = old.capture()
    monkeypatch.setattr(sys, "path", ["/script", "/new/lib", "/new/site", "/old/extra"])
    SysPathState().restore(state)
    assert sys.path == ["/front", "/script", "/new/lib", "/new/site", "/back"]


def test_the_global_random_generator_stays_shared() -> None:
    bound = random.random
    private = random.Random(3)
    got = _roundtrip([bound, random._inst, private])  # type: ignore[attr-defined]
    assert isinstance(got, list)
    assert got[0].__self__ is random._inst and got[1] is random._inst  # type: ignore[attr-defined]
    assert got[2] is not private and got[2].random() == private.random()


def test_numpy_legacy_generator_stays_shared() -> None:
    np = pytest.importorskip("numpy")
    got = _roundtrip([np.random.normal, np.random.RandomState(1)])
    assert isinstance(got, list)
    assert got[0].__self__ is np.random.mtrand._rand
    assert got[1] is not np.random.mtrand._rand


def test_warnings_filters_only_when_changed() -> None:
    with warnings.catch_warnings():
        state = WarningsState()
        assert state.capture() is None
        warnings.simplefilter("ignore", UserWarning)
        changed = state.capture()
        assert changed is not None
        warnings.resetwarnings()
        state.restore(changed)
        assert warnings.filters[0][:3] == ("ignore", None, UserWarning)


def test_logging_handlers_come_back_shared_and_appending(tmp_path: Path) -> None:
    logger = logging.getLogger("portal_ext_test")
    path = tmp_path / "app.log"
    file_handler = logging.FileHandler(path, mode="w")
    console = logging.StreamHandler(sys.stderr)
    logger.addHandler(file_handler)
    logger.addHandler(console)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        logger.info("before")
        state = capture_logging()  # flushes the file handler
        assert path.read_text() == "before\n"
        # pytest's own log capture sits on the root logger (a StringIO): not this test's.
        state["loggers"] = [s for s in state["loggers"] if s[0] == logger.name]
        new_file, new_console, old_state = _roundtrip([file_handler, console, state])  # type: ignore[misc]
        file_handler.close()
        logger.handlers.clear()
        logger.setLevel(logging.NOTSET)
        restore_logging(old_state)
        assert logger.handlers == [new_file, new_console] and logger.level == logging.INFO
        assert new_file.mode == "a" and new_console.stream is sys.stderr
        logger.removeHandler(new_console)
        logger.info("after")
        new_file.close()
        assert path.read_text() == "before\nafter\n"
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        logger.setLevel(logging.NOTSET)
        logger.propagate = True


def test_a_handler_on_another_stream_is_refused() -> None:
    # (A StringIO holds nothing of the process's: it travels by value. A socket does not.)
    left, right = socket.socketpair()
    with left, right, left.makefile("w") as stream:
        handler = logging.StreamHandler(stream)
        with pytest.raises(TypeError, match="SocketIO"):
            _roundtrip(handler)
        handler.close()


def _warn_from(module: types.ModuleType) -> None:
    exec(
        compile("import warnings\nwarnings.warn('shown once', UserWarning)\n", "<w>", "exec"),
        module.__dict__,
    )


def test_warnings_shown_stay_shown_across_a_restore() -> None:
    """A ``default`` warning is shown once per place; a restored process knows which were shown
    (each module's registry comes back under the new process's filters version)."""
    module = types.ModuleType("portal_test_warner")
    sys.modules[module.__name__] = module
    try:
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("default", UserWarning)
            _warn_from(module)
            _warn_from(module)
            assert len(shown) == 1
            carried = pickle.loads(pickle.dumps(WarningRegistries().capture()))
            assert carried is not None and module.__name__ in carried["modules"]
            module.__dict__.pop("__warningregistry__")  # a new process: nothing shown yet
            WarningRegistries().restore(carried)
            _warn_from(module)
            assert len(shown) == 1
            warnings.simplefilter("default", UserWarning)  # filters changed: shown again
            _warn_from(module)
            assert len(shown) == 2
    finally:
        del sys.modules[module.__name__]


def test_no_registry_is_carried_where_the_filters_leave_no_ignored_warning() -> None:
    """The filters' version is read with a warning they ignore or make an error; where they
    show every kind (``-W always``), nothing is carried, and nothing is printed by trying."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert WarningRegistries().capture() is None
    assert caught == []
