"""After a resume, every function of the script and of its modules shares its module's namespace
(``func.__globals__ is sys.modules[func.__module__].__dict__``), paused inside a function or not.

``import multiprocessing`` (which ``import torch`` does) registers the script's module a second
time, as ``sys.modules["__mp_main__"]``. That alias was taken for one more user module: its
namespace travelled as a second copy of ``__main__``'s and, named last, became the namespace the
checkpoint gave every function of the script and every resumed function frame, while the module
frame ran in the real ``__main__``. A training script paused inside ``train()`` then advanced its
global ``epoch`` in one dict while ``train()`` read the other ("epoch 1" at every epoch). The
corpus scripts (``corpus/globals_identity``) have a word-language-model script's shape and print
the check themselves after every report, across a chain of pauses inside ``train()``.
"""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import pytest
from _harness import CORPUS, EXIT_PAUSED, plain_run, run_to_end

from portal.capture.usercode import UserCode

CASES = CORPUS / "globals_identity"
#: The scripts pause themselves at four points of ``train()`` (see their ``PAUSE_AT``).
PAUSES = 4


def _job(tmp_path: Path, variant: str) -> Path:
    job = tmp_path / "job"
    shutil.copytree(CASES / variant, job)
    shutil.copy(CASES / "identity.py", job)
    return job / "main.py"


def _check(script: Path) -> None:
    plain = plain_run(script)
    assert plain.returncode == 0, plain.stderr.decode()
    assert b"BROKEN" not in plain.stdout
    codes, out, err = run_to_end(script, script.with_suffix(".portal"), max_runs=2 * PAUSES + 1)
    broken = [line for line in out.decode().splitlines() if "BROKEN" in line]
    assert not broken, "\n".join(broken[:3])
    assert codes == [EXIT_PAUSED] * PAUSES + [0], err.decode()
    assert out == plain.stdout  # train() saw each epoch's epoch and lr
    assert err == b""


def test_functions_keep_their_module_namespace_across_pauses_in_a_function(
    tmp_path: Path,
) -> None:
    _check(_job(tmp_path, "plain"))


def test_torch_training_script_keeps_its_namespace_across_pauses_in_train(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    _check(_job(tmp_path, "with_torch"))


def test_an_alias_in_sys_modules_is_not_another_user_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``__mp_main__`` (an alias of ``__main__``) is left out; a user module registered twice is
    listed once, under its own name."""
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    (tmp_path / "helper.py").write_text("X = 1\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    helper = types.ModuleType("helper")
    helper.__file__ = str(tmp_path / "helper.py")
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setitem(sys.modules, "__mp_main__", main)
    monkeypatch.setitem(sys.modules, "helper_alias", helper)  # registered before its own name
    monkeypatch.setitem(sys.modules, "helper", helper)

    found = UserCode(str(script)).user_modules()
    assert [(name, module) for name, module in found if module in (main, helper)] == [
        ("helper", helper)
    ]
