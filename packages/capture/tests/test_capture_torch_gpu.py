"""CUDA state through a checkpoint, on a real GPU: tensors, parameters and Adam moments on the
device, views and shared storages, gradients, CUDA generators and RNG state, settings, mixed
precision, and real runs paused mid-epoch and resumed bit for bit; a GPU checkpoint resumed where
the GPU index does not exist, and where there is no GPU at all.

Every test is marked ``gpu`` and skipped without CUDA (CI has none): they run on a lent
accelerator (see ``benchmarks/gpu_check.sh``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _harness import pause_at_line, resume_noted

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from test_capture_torch import roundtrip  # noqa: E402  (through a checkpoint file)

from portal.capture._plugins import load_reducers  # noqa: E402
from portal.capture.extensions import tensors, torch_state  # noqa: E402
from portal.capture.extensions.tensors import CPU_NOTE  # noqa: E402
from portal.capture.pickler import dumps, resolve_reducers  # noqa: E402

SCRIPTS = Path(__file__).parent / "torch_scripts"


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several staging chunks per storage, and the pinned upload path for any storage above
    64 KiB, so that small test tensors go through the pipelines large ones use."""
    monkeypatch.setattr(tensors, "STAGING_CHUNK", 1 << 18)
    monkeypatch.setattr(tensors, "DIRECT_UPLOAD", 1 << 16)


def _train(model: Any, opt: Any, steps: int, seed: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, 256, device="cuda", generator=gen)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


def test_model_gradients_and_adam_moments_stay_on_the_gpu_bit_for_bit(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Linear(512, 8)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    _train(model, opt, 3, seed=1)
    back = roundtrip({"model": model, "opt": opt}, tmp_path)
    m2, o2 = back["model"], back["opt"]
    for p, q in zip(model.parameters(), m2.parameters(), strict=True):
        assert type(q) is torch.nn.Parameter and q.device.type == "cuda" and q.requires_grad
        assert torch.equal(p, q) and torch.equal(p.grad, q.grad) and q.grad.device.type == "cuda"
    for p, q in zip(model.parameters(), m2.parameters(), strict=True):
        s, t = opt.state[p], o2.state[q]
        assert t["exp_avg"].device.type == "cuda"
        assert torch.equal(s["exp_avg"], t["exp_avg"])
        assert torch.equal(s["exp_avg_sq"], t["exp_avg_sq"])
    assert o2.param_groups[0]["params"][0] is m2[0].weight
    _train(model, opt, 2, seed=2)
    _train(m2, o2, 2, seed=2)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), m2.parameters(), strict=True))


def test_views_and_shared_storages_stay_shared_on_the_gpu(tmp_path: Path) -> None:
    base = torch.arange(200_000.0, device="cuda").reshape(400, 500)  # 800 KB: uploaded staged
    view, flat = base[1:, ::2], base.view(-1)
    back = roundtrip({"base": base, "view": view, "flat": flat, "half": base.half()}, tmp_path)
    assert torch.equal(back["view"], view) and back["view"].stride() == view.stride()
    assert back["half"].dtype == torch.float16 and torch.equal(back["half"], base.half())
    back["base"][2, 0] = -1.0
    assert back["view"][1, 0] == -1.0 and back["flat"][1000] == -1.0
    assert back["base"].untyped_storage().data_ptr() == back["flat"].untyped_storage().data_ptr()


def test_low_precision_parameters(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(300, 300).to("cuda", torch.bfloat16)
    fp16 = torch.randn(70_000, device="cuda").half()
    back = roundtrip({"model": model, "fp16": fp16}, tmp_path)
    assert back["model"].weight.dtype == torch.bfloat16
    assert torch.equal(back["model"].weight, model.weight) and torch.equal(back["fp16"], fp16)


def test_work_still_queued_on_the_gpu_is_in_the_checkpoint(tmp_path: Path) -> None:
    """The pause comes while kernels are queued: the copy waits for them (the program's stream)."""
    a = torch.randn(4096, 4096, device="cuda")
    product = a @ a @ a  # queued, not finished, when dumps runs
    back = roundtrip(product, tmp_path)
    torch.cuda.synchronize()
    assert torch.equal(back, product)


def test_generators_and_cuda_rng_state(tmp_path: Path) -> None:
    default = torch.cuda.default_generators[0]
    user = torch.Generator(device="cuda").manual_seed(42)
    torch.rand(3, device="cuda", generator=user)
    back = roundtrip({"default": default, "user": user}, tmp_path)
    assert back["default"] is default  # by reference: the process's own
    assert back["user"] is not user and back["user"].device.type == "cuda"
    assert torch.equal(
        torch.rand(5, device="cuda", generator=back["user"]),
        torch.rand(5, device="cuda", generator=user),
    )
    torch.cuda.manual_seed_all(3)
    torch.rand(7, device="cuda")
    state = roundtrip(torch_state.capture_rng(), tmp_path)
    expected = torch.rand(4, device="cuda")
    torch.cuda.manual_seed_all(99)
    torch_state.restore_rng(state)
    assert torch.equal(torch.rand(4, device="cuda"), expected)


def test_cuda_settings_the_program_changed_come_back() -> None:
    settings = torch_state.TorchSettings()
    baseline = dict(settings.baseline or {})
    names = ("cuda.matmul.allow_tf32", "cudnn.allow_tf32", "cudnn.benchmark")
    changed = {name: not baseline[name] for name in names}
    try:
        settings.restore(changed)
        captured = settings.capture()
        assert {k: captured[k] for k in names} == changed
        settings.restore({k: baseline[k] for k in names})
        settings.restore(captured)
        assert torch.backends.cuda.matmul.allow_tf32 == changed["cuda.matmul.allow_tf32"]
        assert torch.backends.cudnn.allow_tf32 == changed["cudnn.allow_tf32"]
        assert torch.backends.cudnn.benchmark == changed["cudnn.benchmark"]
    finally:
        settings.restore({k: baseline[k] for k in names})


@pytest.mark.parametrize("size", [1000, 3 << 20])  # one plain copy; the pinned pipeline
def test_a_gpu_index_that_does_not_exist_here_maps_onto_one_that_does(size: int) -> None:
    """Saved on ``cuda:N`` for N past this machine's count (``cuda:1`` on a one-GPU machine)."""
    count = torch.cuda.device_count()
    data = torch.randint(0, 255, (size,), dtype=torch.uint8).numpy().tobytes()
    storage = tensors._rebuild_storage(memoryview(bytearray(data)), f"cuda:{count}")
    assert storage.device == torch.device("cuda", 0)
    tensor = tensors._rebuild_tensor(storage, 0, (size,), (1,), torch.uint8, False)
    assert tensor.cpu().numpy().tobytes() == data


def test_a_check_of_gpu_state_copies_nothing_to_the_host() -> None:
    """The checkpoint check (``keep=False``) measures GPU storages without fetching them."""
    big = torch.zeros(50 << 20, dtype=torch.uint8, device="cuda")
    _data, buffers, size = dumps(
        big, namespaces={}, reducers=resolve_reducers(load_reducers()), keep=False
    )
    assert size >= 50 << 20 and all(b.nbytes == 0 for b in buffers)


# -- real runs, paused mid-epoch ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["amp", "fp32"])
@pytest.mark.parametrize("at", [b"step 3 ", b"eval 15"])  # mid-epoch; inside autocast
def test_a_gpu_training_loop_paused_mid_epoch_resumes_bit_for_bit(
    tmp_path: Path, mode: str, at: bytes
) -> None:
    script = Path(shutil.copy(SCRIPTS / "gpu_train.py", tmp_path / "gpu_train.py"))
    plain = subprocess.run(
        [sys.executable, str(script), mode], capture_output=True, cwd=tmp_path, timeout=300
    )
    assert plain.returncode == 0, plain.stderr.decode()[-3000:]
    first, ckpt = pause_at_line(script, mode, line=at, cwd=tmp_path)
    rest, err, notes = resume_noted(ckpt, tmp_path)
    assert notes == []
    assert first + rest == plain.stdout, err.decode()[-3000:]
    summary = plain.stdout.splitlines()[-2]  # Adam's step counts live on the CPU
    assert b"'cuda'" in summary and b"torch.bfloat16" in summary, summary


def test_a_gpu_checkpoint_resumed_without_a_gpu_runs_on_on_the_cpu(tmp_path: Path) -> None:
    script = Path(shutil.copy(SCRIPTS / "gpu_values.py", tmp_path / "gpu_values.py"))
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr.decode()[-3000:]
    first, ckpt = pause_at_line(script, line=b"5 ", cwd=tmp_path)
    started = time.monotonic()
    rest, err, notes = resume_noted(ckpt, tmp_path, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert notes == [CPU_NOTE], (notes, err.decode()[-2000:], time.monotonic() - started)
    assert err.decode().count(f"portal: {CPU_NOTE}") == 1
    assert rest.decode().splitlines()[-1].endswith(" cpu")
    # The values are the GPU run's: only the device word changes after the resume.
    assert (first + rest).replace(b" cpu\n", b" cuda\n") == plain.stdout
