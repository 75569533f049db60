"""A pause between a forward pass and ``backward()``: the autograd graph cannot travel (it is the
process's own C++ objects), so the pause, the checkpoint check and a periodic checkpoint wait for
a line after ``backward()`` instead of carrying the loss without its graph (which made the
resumed ``backward()`` fail: "element 0 of tensors does not require grad"). A graph that is never
used holds the pause until its deadline, named with the way out."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _harness import EXIT_PAUSED, connect, runtime, short_dir

torch = pytest.importorskip("torch")

from portal.capture._plugins import load_reducers  # noqa: E402
from portal.capture.extensions.tensors import unused_graph_node  # noqa: E402
from portal.capture.pickler import dumps, resolve_reducers  # noqa: E402
from portal.core.specs import WaitForSafePoint  # noqa: E402

STEP = """
import os
import signal
import sys
import time

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
flag = sys.argv[1] if len(sys.argv) > 1 else ""
start = os.environ.get("START_FLAG", "")
while start and not os.path.exists(start):  # until the test listens to the control channel
    time.sleep(0.01)
for step in range(3):
    opt.zero_grad()
    loss = model(torch.randn(16, 4)).pow(2).mean()
    print("forward", step, flush=True)
    if step == 1 and os.environ.get("SIGTERM_AT_STEP_1"):
        os.kill(os.getpid(), signal.SIGTERM)  # the pause is wanted from the next line on
    while flag and not os.path.exists(flag):  # held here until the test says so
        time.sleep(0.01)
    loss.backward()
    opt.step()
    print(step, f"{loss.item():.10f}", flush=True)
print("weights", [round(float(p.sum()), 8) for p in model.parameters()])
"""

NEVER_USED = """
import time

import torch

cell = torch.nn.RNNCell(3, 5)
h = torch.zeros(1, 5)
for step in range(100000):
    h = cell(torch.ones(1, 3), h)  # never detached, never backward(): the graph only grows
    if step == 10:  # from here on h is always in a graph (before the loop it is not)
        print("looping", flush=True)
    time.sleep(0.001)
"""


def _write(tmp: Path, source: str) -> Path:
    script = tmp / "job.py"
    script.write_text(textwrap.dedent(source))
    return script


def _run(
    script: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str, str]:
    """``script`` under the runtime, in its directory: (process, checkpoint path, socket)."""
    work = short_dir()
    ckpt, sock = os.path.join(work, "ck.portal"), os.path.join(work, "c.sock")
    proc = subprocess.Popen(
        runtime("run", "--control", sock, "--checkpoint", ckpt, str(script), *args),
        cwd=script.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    return proc, ckpt, sock


def _plain(script: Path, *args: str) -> bytes:
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, cwd=script.parent, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def test_the_unit_tells_a_graph_backward_still_needs_from_one_it_used() -> None:
    model = torch.nn.Linear(3, 1)
    out = model(torch.randn(4, 3))
    loss = out.pow(2).mean()
    assert unused_graph_node(loss.grad_fn) == "MeanBackward0" or unused_graph_node(loss.grad_fn)
    reducers = resolve_reducers(load_reducers())
    with pytest.raises(WaitForSafePoint, match=r"backward\(\) has not used yet"):
        dumps({"loss": loss}, namespaces={}, reducers=reducers)
    loss.backward()
    assert unused_graph_node(loss.grad_fn) is None and unused_graph_node(out.grad_fn) is None
    dumps({"loss": loss, "out": out}, namespaces={}, reducers=reducers)  # values now


def test_a_sigterm_before_backward_is_taken_after_it_and_the_resume_matches(
    tmp_path: Path,
) -> None:
    script = _write(tmp_path, STEP)
    expected = _plain(script)
    proc, ckpt, sock = _run(
        script, env={"SIGTERM_AT_STEP_1": "1", "START_FLAG": str(tmp_path / "start")}
    )
    control = connect(proc, sock)
    assert control is not None
    (tmp_path / "start").touch()
    events = control.events_until({"paused", "failed", "abandoned"}, timeout=60)
    control.close()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PAUSED, err.decode()
    deferred = [p for e in events if e["event"] == "deferred" for p in e["problems"]]
    assert deferred and deferred[0]["name"] == "loss" and deferred[0]["kind"] == "position"
    assert deferred[0]["type_name"] == "torch.Tensor"
    assert "backward() has not used yet" in deferred[0]["reason"]
    assert out.splitlines()[-1] == b"forward 1"  # not paused before step 1's backward ran...
    resumed = subprocess.run(
        runtime("resume", ckpt), cwd=tmp_path, capture_output=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert out + resumed.stdout == expected  # ...and not run twice


def test_a_check_between_forward_and_backward_waits_and_names_nothing(tmp_path: Path) -> None:
    """The check is asked for while the script is held before ``backward()``: it reports only
    once ``backward()`` has run, with no problem (the loss is not something a checkpoint can
    never carry), and the script's output is untouched."""
    script = _write(tmp_path, STEP)
    flag = tmp_path / "go"
    proc, _, sock = _run(script, str(flag))
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first == b"forward 0\n"
        control = connect(proc, sock)
        assert control is not None
        control.send({"op": "probe"})
        waiting = control.events_until({"deferred", "probe"})
        assert [e["event"] for e in waiting][-1] == "deferred"  # no report while held
        assert waiting[-1]["problems"][0]["name"] == "loss"
        flag.touch()
        report = control.events_until({"probe"})[-1]
        assert report.get("problems", []) == [] and not report.get("partial")
        control.close()
        rest, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
        assert first + rest == _plain(script, str(flag))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_graph_never_used_holds_the_pause_until_its_deadline_named(tmp_path: Path) -> None:
    script = _write(tmp_path, NEVER_USED)
    proc, ckpt, sock = _run(script)
    try:
        control = connect(proc, sock)
        assert control is not None
        assert proc.stdout is not None and proc.stdout.readline() == b"looping\n"
        control.pause(within=1.5)
        events = control.events_until({"paused", "abandoned"}, timeout=60)
        assert events[-1]["event"] == "abandoned" and events[-1]["reason"] == "deadline"
        named = {p["name"]: p for p in events[-1]["problems"]}
        assert "h" in named, events[-1]
        assert "backward() has not used yet" in named["h"]["reason"]
        assert ".detach()" in named["h"]["reason"]
        assert not os.path.exists(ckpt)
        control.close()
    finally:
        proc.kill()
        proc.communicate()
