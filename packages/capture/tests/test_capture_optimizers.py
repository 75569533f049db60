"""Optimizers whole (issue 40, item 3): every ``torch.optim`` class, every LR scheduler, the
``GradScaler``, ``swa_utils`` and an EMA, through a checkpoint file in the middle of training,
then trained on: parameters, the optimizer's state and the learning rates equal an uninterrupted
run's bit for bit, and the resumed objects warn of nothing (torch's own pickling keeps an
optimizer's defaults, state and groups only: LBFGS lost its ``_params``, a scheduler the
``step`` it wraps).

The classes are found in the installed torch, not listed: a new optimizer or scheduler is tested
the day torch ships it.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.optim import lr_scheduler, swa_utils  # noqa: E402

from portal.capture._plugins import load_reducers  # noqa: E402
from portal.capture.alignment import remainder_of  # noqa: E402
from portal.capture.image import CheckpointImage, Header, InterpreterInfo, read_image, write_image  # noqa: E402
from portal.capture.pickler import dumps, resolve_reducers  # noqa: E402

BEFORE, AFTER = 4, 5

OPTIMIZERS = sorted(
    name
    for name, cls in vars(torch.optim).items()
    if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)
    and cls is not torch.optim.Optimizer
)  # fmt: skip
#: Arguments an optimizer needs beyond its parameters (what its defaults do not give).
OPTIMIZER_ARGS: dict[str, dict[str, Any]] = {
    "SGD": {"lr": 0.05, "momentum": 0.9, "nesterov": True},
    "LBFGS": {"lr": 0.5, "history_size": 3, "max_iter": 4},
    "Muon": {"lr": 0.02},
}


def _through_a_file(obj: Any, tmp_path: Path) -> Any:
    """``obj`` pickled as a checkpoint pickles it, written, read back and loaded."""
    data, buffers, _ = dumps(obj, namespaces={}, reducers=resolve_reducers(load_reducers()))
    header = Header(
        interpreter=InterpreterInfo.current(), script="s.py", argv=[], cwd="/", created=0
    )
    path = tmp_path / "ck.portal"
    alignments = [remainder_of(b) for b in buffers]
    write_image(
        CheckpointImage(header=header, pickle=data, buffers=buffers, alignments=alignments), path
    )
    image = read_image(path)
    return pickle.loads(image.pickle, buffers=image.buffers)


def _batch(step: int, sparse: bool) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(1000 + step)
    if sparse:
        return torch.randint(0, 10, (8,), generator=g), torch.randn(8, 3, generator=g)
    return torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)


def _model(sparse: bool) -> Any:
    torch.manual_seed(0)
    if sparse:
        return nn.Embedding(10, 3, sparse=True)
    # No biases: every parameter 2-D (Muon takes matrices only).
    return nn.Sequential(nn.Linear(6, 8, bias=False), nn.Tanh(), nn.Linear(8, 3, bias=False))


def _step(run: dict[str, Any], step: int) -> None:
    model, opt = run["model"], run["opt"]
    x, y = _batch(step, run["sparse"])

    def closure() -> Any:
        opt.zero_grad()
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        return loss

    loss = opt.step(closure)
    for name in ("sched", "sched2"):
        sched = run.get(name)
        if isinstance(sched, lr_scheduler.ReduceLROnPlateau):
            sched.step(float(loss.detach()))
        elif sched is not None:
            sched.step()
    if run.get("swa") is not None:
        run["swa"].update_parameters(model)


def _fingerprint(run: dict[str, Any]) -> list[bytes]:
    """Every number a run holds: parameters, optimizer state, learning rates, averages."""
    found = [p.detach().numpy().tobytes() for p in run["model"].parameters()]
    for state in run["opt"].state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                found.append(value.detach().numpy().tobytes())
            elif isinstance(value, (int, float)):
                found.append(repr(value).encode())
    found += [repr(g["lr"]).encode() for g in run["opt"].param_groups]
    if run.get("swa") is not None:
        found += [p.detach().numpy().tobytes() for p in run["swa"].parameters()]
    return found


def _compare(make: Callable[[], dict[str, Any]], tmp_path: Path) -> None:
    whole = make()
    for step in range(BEFORE + AFTER):
        _step(whole, step)
    paused = make()
    for step in range(BEFORE):
        _step(paused, step)
    resumed = _through_a_file(paused, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a resumed object warns of nothing
        for step in range(BEFORE, BEFORE + AFTER):
            _step(resumed, step)
    assert _fingerprint(resumed) == _fingerprint(whole)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_optimizer_trains_on_as_if_never_paused(name: str, tmp_path: Path) -> None:
    sparse = name == "SparseAdam"

    def make() -> dict[str, Any]:
        model = _model(sparse)
        cls = getattr(torch.optim, name)
        return {
            "model": model,
            "opt": cls(model.parameters(), **OPTIMIZER_ARGS.get(name, {})),
            "sparse": sparse,
        }

    _compare(make, tmp_path)


def _schedulers(opt: Any) -> dict[str, Any]:
    """One of each scheduler torch has, by name (the composite ones over simple ones)."""
    return {
        "LambdaLR": lambda: lr_scheduler.LambdaLR(opt, lambda e: 0.9**e),
        "MultiplicativeLR": lambda: lr_scheduler.MultiplicativeLR(opt, lambda e: 0.95),
        "StepLR": lambda: lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
        "MultiStepLR": lambda: lr_scheduler.MultiStepLR(opt, milestones=[2, 5], gamma=0.3),
        "ConstantLR": lambda: lr_scheduler.ConstantLR(opt, factor=0.5, total_iters=5),
        "LinearLR": lambda: lr_scheduler.LinearLR(opt, start_factor=0.2, total_iters=6),
        "ExponentialLR": lambda: lr_scheduler.ExponentialLR(opt, gamma=0.8),
        "SequentialLR": lambda: lr_scheduler.SequentialLR(
            opt,
            [
                lr_scheduler.ConstantLR(opt, factor=0.3, total_iters=3),
                lr_scheduler.ExponentialLR(opt, 0.9),
            ],
            milestones=[3],
        ),
        "PolynomialLR": lambda: lr_scheduler.PolynomialLR(opt, total_iters=8, power=2.0),
        "CosineAnnealingLR": lambda: lr_scheduler.CosineAnnealingLR(opt, T_max=7),
        "ChainedScheduler": lambda: lr_scheduler.ChainedScheduler(
            [
                lr_scheduler.ConstantLR(opt, factor=0.5, total_iters=4),
                lr_scheduler.ExponentialLR(opt, 0.9),
            ]
        ),
        "ReduceLROnPlateau": lambda: lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5),
        "CyclicLR": lambda: lr_scheduler.CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=3),
        "CosineAnnealingWarmRestarts": lambda: lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=3),
        "OneCycleLR": lambda: lr_scheduler.OneCycleLR(
            opt, max_lr=0.1, total_steps=BEFORE + AFTER + 1
        ),
    }


SCHEDULERS = sorted(
    name
    for name, cls in vars(lr_scheduler).items()
    if isinstance(cls, type)
    and issubclass(cls, (lr_scheduler.LRScheduler, lr_scheduler.ReduceLROnPlateau))
    and not name.startswith("_") and name != "LRScheduler"
)  # fmt: skip


@pytest.mark.parametrize("name", SCHEDULERS)
def test_every_scheduler_schedules_on_as_if_never_paused(name: str, tmp_path: Path) -> None:
    def make() -> dict[str, Any]:
        model = _model(False)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        made = _schedulers(opt)
        assert name in made, f"torch has a scheduler this test does not make: {name}"
        return {"model": model, "opt": opt, "sched": made[name](), "sparse": False}

    _compare(make, tmp_path)


def test_swa_and_an_ema_average_on_as_if_never_paused(tmp_path: Path) -> None:
    def make() -> dict[str, Any]:
        model = _model(False)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        return {
            "model": model,
            "opt": opt,
            "sched": swa_utils.SWALR(opt, swa_lr=0.05, anneal_epochs=3),
            "swa": swa_utils.AveragedModel(model),
            "sparse": False,
        }

    def make_ema() -> dict[str, Any]:
        run = make()
        run["swa"] = swa_utils.AveragedModel(
            run["model"], multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.9)
        )
        return run

    _compare(make, tmp_path)
    _compare(make_ema, tmp_path)


def test_a_grad_scaler_scales_on_as_if_never_paused(tmp_path: Path) -> None:
    """Mixed precision's scaler: its scale, growth tracker and the optimizer it steps."""

    def step(run: dict[str, Any], i: int) -> None:
        model, opt, scaler = run["model"], run["opt"], run["scaler"]
        x, y = _batch(i, False)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = (model(x) - y).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    def make() -> dict[str, Any]:
        model = _model(False)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
        return {"model": model, "opt": opt, "scaler": scaler}

    whole, paused = make(), make()
    for i in range(BEFORE + AFTER):
        step(whole, i)
    for i in range(BEFORE):
        step(paused, i)
    resumed = _through_a_file(paused, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(BEFORE, BEFORE + AFTER):
            step(resumed, i)
    assert resumed["scaler"].get_scale() == whole["scaler"].get_scale()
    assert resumed["scaler"]._get_growth_tracker() == whole["scaler"]._get_growth_tracker()
    assert [p.detach().numpy().tobytes() for p in resumed["model"].parameters()] == [
        p.detach().numpy().tobytes() for p in whole["model"].parameters()
    ]
