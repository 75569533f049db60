"""The checkpoint check names each value a checkpoint cannot carry exactly once, as the script
knows it, with its type, the serializer's reason and the line where it was checked: a hash
object, a socket, a held lock, a running thread, an open file and a generator partway whose
globals are no module's namespace (a library's is carried), in globals and in locals three calls deep. Once the script lets go of them, the check
passes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _harness import CORPUS, runtime

SCRIPT = CORPUS / "probe" / "holds_everything.py"

HASH = ("_hashlib.HASH", "TypeError: cannot pickle '_hashlib.HASH' object")
SOCKET = ("socket.socket", "TypeError: cannot pickle 'socket' object")
# A held lock: under Portal the capture_locks serializer says why (an unlocked one travels);
# the engine alone refuses every lock.
LOCK_UNDER_PORTAL = (
    "_thread.lock",
    "TypeError: cannot pickle '_thread.lock' object: it is a lock held at the pause (a new "
    "process cannot hold it for its owner: release it before the pause point, e.g. end the "
    "`with` block before the loop's next step)",
)
LOCK = ("_thread.lock", "TypeError: cannot pickle '_thread.lock' object")
THREAD = (
    "threading.Thread",
    "TypeError: cannot pickle 'Thread' object (it is part of the process): make the object "
    "that owns it again at the resume, with portal.runtime.remake(obj, factory, *args) where "
    "obj is made",
)
# Under Portal the capture_files serializer names why the file cannot travel (one inside the
# working directory would); the engine alone, without plugins, refuses every open file.
FILE_UNDER_PORTAL = (
    "_io.TextIOWrapper",
    f"TypeError: open file outside the job's working directory: {os.__file__} (close it before "
    "the pause, or keep it under the working directory)",
)
FILE = ("_io.TextIOWrapper", "TypeError: cannot pickle '_io.TextIOWrapper' object")
GENERATOR = (
    "generator",
    "TypeError: cannot pickle 'generator' object: numbers of ? runs with globals that are no "
    "module's namespace (exec with a dict of its own)",
)


def _line(marker: str) -> int:
    lines = SCRIPT.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.endswith(f"# {marker}"))


@pytest.mark.parametrize("under_portal", [True, False])
def test_each_problem_is_named_once_then_all_clear(tmp_path: Path, under_portal: bool) -> None:
    script = tmp_path / SCRIPT.name
    shutil.copy(SCRIPT, script)
    cmd = runtime("run", script.name) if under_portal else [sys.executable, script.name]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    first, second = (json.loads(line) for line in done.stdout.decode().splitlines())
    inner = f"{script.name}:{_line('CHECK level3')} in level3"
    in_level2 = f"{script.name}:{_line('CALL level2')} in level2"
    in_level1 = f"{script.name}:{_line('CALL level1')} in level1"
    file = FILE_UNDER_PORTAL if under_portal else FILE
    lock = LOCK_UNDER_PORTAL if under_portal else LOCK
    expected = [
        ["l3_sock", *SOCKET, inner],
        ["l3_gen", *GENERATOR, inner],
        ["l2_lock", *lock, in_level2],
        ["l2_file", *file, in_level2],
        ["l1_digest", *HASH, in_level1],
        ["l1_thread", *THREAD, in_level1],
        ["g_digest", *HASH, inner],  # globals: checked at the pause, the innermost frame
        ["g_sock", *SOCKET, inner],
        ["g_lock", *lock, inner],
        ["g_thread", *THREAD, inner],
        ["g_file", *file, inner],
        ["g_gen", *GENERATOR, inner],
    ]
    assert sorted(first) == sorted(expected)
    assert len(first) == len({p[0] for p in first})  # each named exactly once
    assert second == []  # let go of: all clear
