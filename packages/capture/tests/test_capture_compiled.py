"""``torch.compile``d modules and functions: they travel as the call that made them and are
compiled again in the resumed process; dynamo's globals in the program's namespace do not
travel. Unit round-trips through the checkpoint pickler, and a compiled training loop paused in
a real process and resumed identical. torch: Python 3.11 (the local CPU build)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _harness import paused_against_plain  # noqa: E402

from portal.capture import remade  # noqa: E402
from portal.capture._plugins import load_reducers  # noqa: E402
from portal.capture.extensions import compiled  # noqa: E402
from portal.capture.pickler import dumps, resolve_reducers  # noqa: E402

SCRIPTS = Path(__file__).parent / "torch_scripts"


@pytest.fixture(autouse=True)
def armed() -> None:
    compiled.install(torch)  # as the runtime does when torch is imported


def round_trip(obj: Any) -> Any:
    data, buffers, _ = dumps(obj, namespaces={}, reducers=resolve_reducers(load_reducers()))
    return pickle.loads(data, buffers=buffers)


def _square_sum(x: Any) -> Any:
    return (x * x).sum()


def test_a_compiled_module_comes_back_compiled_around_the_same_module() -> None:
    net = torch.nn.Linear(4, 2)
    model = torch.compile(net, backend="aot_eager")
    x = torch.randn(3, 4)
    expected = model(x)
    back = round_trip({"net": net, "model": model, "params": list(net.parameters())})
    again = back["model"]
    assert type(again) is type(model) and again._orig_mod is back["net"]
    assert back["params"][0] is back["net"].weight  # the optimizer's view stays shared
    assert torch.equal(again(x), expected)
    assert remade.recipe_of(again) is not None  # registered again: it can travel again
    assert torch.equal(round_trip(again)(x), expected)


def test_a_compiled_function_and_a_module_compiled_in_place_come_back_compiled() -> None:
    fn = torch.compile(_square_sum, backend="aot_eager")
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    net.compile(backend="aot_eager")
    x = torch.randn(2, 4)
    expected = (fn(x), net(x))
    back = round_trip({"fn": fn, "net": net})
    assert back["fn"]._torchdynamo_orig_callable is _square_sum
    assert torch.equal(back["fn"](x), expected[0])
    assert back["net"]._compiled_call_impl is not None
    assert torch.equal(back["net"](x), expected[1])


def test_compile_disabled_returns_the_model_itself_unregistered() -> None:
    net = torch.nn.Linear(2, 2)
    assert torch.compile(net, disable=True) is net and remade.recipe_of(net) is None


@pytest.mark.parametrize(
    ("backend", "at_step"),
    [
        ("aot_eager", 2),
        ("aot_eager", 15),
        pytest.param(
            "inductor",
            6,
            marks=pytest.mark.skipif(
                os.environ.get("PORTAL_COMPILE_INDUCTOR") != "1",
                reason="inductor compiles C++ for a minute on 2 CPUs: PORTAL_COMPILE_INDUCTOR=1",
            ),
        ),
    ],
)
def test_a_compiled_training_loop_pauses_and_resumes_identical(
    tmp_path: Path, backend: str, at_step: int
) -> None:
    """A compiled model (and loss, and a submodule compiled in place, and a graph break)
    paused mid-run: every safe point was refused before (dynamo's globals, FakeTensors, its
    thread-local context). Resumed in a new process, it compiles again and prints what an
    uninterrupted run prints."""
    run = paused_against_plain(
        tmp_path,
        SCRIPTS / "compiled_loop.py",
        backend,
        ready=lambda out: out.count(b"step ") > at_step,
        timeout=300,
    )
    assert run.out == run.plain.stdout, run.err.decode()[-3000:]
    assert run.out.endswith(b"same module True\n")
