"""torch tensors, generators, RNG states and numeric settings through a checkpoint's pickle:
storages travel once, out of band, and every sharing, gradient and setting survives."""

from __future__ import annotations

import pickle
import subprocess
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from portal.capture._plugins import load_reducers  # noqa: E402
from portal.capture.extensions import tensors, torch_state  # noqa: E402
from portal.capture.image import CheckpointImage, Header, InterpreterInfo, read_image, write_image  # noqa: E402
from portal.capture.pickler import dumps, resolve_reducers  # noqa: E402
from portal.core.specs import WaitForSafePoint  # noqa: E402


def roundtrip(obj: Any, tmp_path: Any = None) -> Any:
    """Pickle with the plugins' reducers; load from buffers as a resume would (through a
    checkpoint file when ``tmp_path`` is given)."""
    data, buffers, _ = dumps(obj, namespaces={}, reducers=resolve_reducers(load_reducers()))
    if tmp_path is None:
        return pickle.loads(data, buffers=[memoryview(bytearray(b)) for b in buffers])
    header = Header(
        interpreter=InterpreterInfo.current(), script="s.py", argv=[], cwd="/", created=0
    )
    path = tmp_path / "ck.portal"
    write_image(CheckpointImage(header=header, pickle=data, buffers=buffers), path)
    image = read_image(path)
    return pickle.loads(image.pickle, buffers=image.buffers)


def test_views_and_shared_storages_stay_shared(tmp_path: Any) -> None:
    base = torch.arange(24.0).reshape(4, 6)
    view = base[1:, ::2]
    flat = base.view(-1)
    back = roundtrip({"base": base, "view": view, "flat": flat}, tmp_path)
    assert torch.equal(back["view"], view) and back["view"].stride() == view.stride()
    back["base"][2, 0] = -1.0
    assert back["view"][1, 0] == -1.0 and back["flat"][12] == -1.0
    assert back["base"].untyped_storage().data_ptr() == back["flat"].untyped_storage().data_ptr()


def test_one_buffer_per_storage_and_no_copy_of_cpu_memory() -> None:
    big = torch.zeros(1000)
    _, buffers, _ = dumps(
        [big, big[10:], big.view(10, 100)],
        namespaces={},
        reducers=resolve_reducers(load_reducers()),
    )
    assert [b.nbytes for b in buffers] == [4000]
    big[0] = 5.0  # the buffer is the tensor's own memory
    assert bytes(buffers[0][:4]) == torch.tensor([5.0]).numpy().tobytes()


_IMAGE_IN_A_CYCLE = """
import gc, torch
from portal.capture._plugins import load_reducers
from portal.capture.pickler import dumps, resolve_reducers
reducers = resolve_reducers(load_reducers())
for _ in range(20):
    data, buffers, _ = dumps([torch.randn(1000) for _ in range(20)], namespaces={}, reducers=reducers)
    holder = [buffers]
    holder.append(holder)
    del data, buffers, holder
    gc.collect()
print("collected")
"""


def test_an_image_in_a_reference_cycle_is_collected_without_harm() -> None:
    """The buffers of tensors' memory, left in a reference cycle (an exception's traceback that
    holds a capture's frames, in the multi-rank job that found it): the garbage collector frees
    them as any garbage. A memoryview that had exported its buffer to the pickle buffer made
    the collector fail to clear it, free the memory under it anyway, and crash the process."""
    done = subprocess.run(
        [sys.executable, "-c", _IMAGE_IN_A_CYCLE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout == "collected\n", done.stderr
    assert "BufferError" not in done.stderr, done.stderr


class _Refused:
    def __reduce__(self) -> Any:
        raise TypeError("not this one")


def test_a_failed_pickle_keeps_no_tensor_memory_in_its_traceback() -> None:
    """A checkpoint that fails (a value cannot be carried) raises through the pickler's frame;
    what that frame had gathered of the state's memory is let go before the error leaves it
    (the engine keeps the error while it names the value, and the pause is tried again)."""
    with pytest.raises(TypeError) as caught:
        dumps(
            [torch.randn(1000), _Refused()],
            namespaces={},
            reducers=resolve_reducers(load_reducers()),
        )
    tb = caught.value.__traceback__
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    (frame,) = [f for f in frames if f.f_code is dumps.__code__]
    assert frame.f_locals["buffers"] == []


def test_model_gradients_and_adam_state_survive() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(5, 3)).sum().backward()
        opt.step()
    model[1].weight.requires_grad_(False)
    back = roundtrip({"model": model, "opt": opt})
    m2, o2 = back["model"], back["opt"]
    for p, q in zip(model.parameters(), m2.parameters(), strict=True):
        assert type(q) is torch.nn.Parameter and torch.equal(p, q)
        assert q.requires_grad == p.requires_grad
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            assert torch.equal(p.grad, q.grad)
    assert o2.param_groups[0]["params"][0] is m2[0].weight  # the optimizer holds the model's own
    x = torch.randn(5, 3)
    for mod, opt_ in ((model, opt), (m2, o2)):
        opt_.zero_grad()
        mod(x).sum().backward()
        opt_.step()
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), m2.parameters(), strict=True))


def test_a_tensor_inside_a_used_graph_travels_as_its_value() -> None:
    """Before ``backward()`` the graph is still needed: not now (the pause waits, see
    test_capture_torch_graphs.py); after it, the loss travels as its value."""
    w = torch.ones(3, requires_grad=True)
    loss = (w * 2).sum()
    with pytest.raises(WaitForSafePoint):
        roundtrip({"loss": loss})
    loss.backward()
    back = roundtrip({"loss": loss})
    assert back["loss"].item() == 6.0 and not back["loss"].requires_grad


def test_unsupported_tensors_are_refused_by_name() -> None:
    with pytest.warns(UserWarning, match="beta"):  # torch's own, on making one
        csr = torch.eye(3).to_sparse_csr()
    with pytest.raises(TypeError, match=r"sparse_csr.*to_dense"):
        roundtrip(csr)
    with pytest.raises(TypeError, match="meta"):
        roundtrip(torch.empty(2, device="meta"))


def test_sparse_coo_tensors_travel_as_indices_and_values() -> None:
    """An ``nn.Embedding(sparse=True)``'s gradient is one: ``SparseAdam`` steps on it."""
    coalesced = torch.eye(3).to_sparse()
    loose = torch.sparse_coo_tensor(
        [[0, 0, 2], [1, 1, 0]], [1.0, 2.0, 3.0], (3, 3), check_invariants=True
    )
    back = roundtrip({"coalesced": coalesced, "loose": loose})
    for name, original in (("coalesced", coalesced), ("loose", loose)):
        assert back[name].layout == torch.sparse_coo
        assert back[name].is_coalesced() == original.is_coalesced()
        assert torch.equal(back[name].to_dense(), original.to_dense())


def test_dtypes_and_empty_tensors() -> None:
    values = [
        torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        torch.tensor([1, 2], dtype=torch.int8),
        torch.tensor([True, False]),
        torch.empty(0, 3),
        torch.tensor(3.25, dtype=torch.float64),
        torch.tensor([1 + 2j]),
    ]
    for before, after in zip(values, roundtrip(values), strict=True):
        assert after.dtype == before.dtype and after.shape == before.shape
        assert torch.equal(after, before)


def test_generators_default_by_reference_others_by_value() -> None:
    g = torch.Generator().manual_seed(42)
    torch.rand(3, generator=g)
    back = roundtrip({"default": torch.default_generator, "g": g})
    assert back["default"] is torch.default_generator
    assert back["g"] is not g
    assert torch.equal(torch.rand(4, generator=back["g"]), torch.rand(4, generator=g))


def test_global_rng_state_is_captured_and_restored() -> None:
    torch.manual_seed(3)
    torch.rand(5)
    state = roundtrip(torch_state.capture_rng())
    expected = torch.rand(4)
    torch.manual_seed(99)
    torch_state.restore_rng(state)
    assert torch.equal(torch.rand(4), expected)


def test_every_numeric_setting_the_program_changed_is_restored() -> None:
    settings = torch_state.TorchSettings()  # torch is loaded: the baseline is read now
    assert settings.capture() == {}
    changed = {
        "default_dtype": torch.float64,
        "float32_matmul_precision": "medium",
        "deterministic_algorithms": (True, True),
        "cudnn.enabled": False,
        "cudnn.benchmark": True,
        "cudnn.deterministic": True,
        "cudnn.allow_tf32": False,
        "grad_enabled": False,
        "num_threads": max(1, torch.get_num_threads() - 1) if torch.get_num_threads() > 1 else 2,
    }
    baseline = dict(settings.baseline or {})
    try:
        settings.restore(changed)
        captured = roundtrip(settings.capture())
        for name, value in changed.items():
            assert captured[name] == value, name
        settings.restore({k: v for k, v in baseline.items() if k in changed})
        assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()
        settings.restore(captured)
        assert torch.get_default_dtype() == torch.float64
        assert torch.get_float32_matmul_precision() == "medium"
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert not torch.backends.cudnn.enabled and torch.backends.cudnn.benchmark
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.allow_tf32
        assert not torch.is_grad_enabled()
        assert torch.get_num_threads() == changed["num_threads"]
    finally:
        settings.restore({k: v for k, v in baseline.items() if k in changed})
        torch.set_grad_enabled(True)


def test_gpu_storage_restores_onto_the_cpu_with_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint of a GPU job resumed on a machine without one: the bytes land on the CPU."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the storage would go onto it")
    data = torch.arange(4.0).numpy().tobytes()
    storage = tensors._rebuild_storage(memoryview(bytearray(data)), "cuda:3")
    tensor = tensors._rebuild_tensor(storage, 0, (4,), (1,), torch.float32, False)
    assert tensor.device.type == "cpu" and tensor.tolist() == [0.0, 1.0, 2.0, 3.0]
    tensors._CPU_NOTE_SHOWN = False
    tensors.resume_device("cuda:0")
    assert "no CUDA GPU" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_tensors_come_back_on_a_gpu(tmp_path: Any) -> None:
    device = f"cuda:{torch.cuda.device_count() - 1}"
    model = torch.nn.Linear(64, 64).to(device)
    big = torch.randn(1 << 21, device=device)  # several staged chunks when STAGING_CHUNK is small
    tensors.STAGING_CHUNK, chunk = 1 << 18, tensors.STAGING_CHUNK
    try:
        back = roundtrip({"model": model, "big": big, "view": big[5:]}, tmp_path)
    finally:
        tensors.STAGING_CHUNK = chunk
    assert back["big"].device.type == "cuda" and torch.equal(back["big"], big)
    assert back["view"].untyped_storage().data_ptr() == back["big"].untyped_storage().data_ptr()
    assert back["model"].weight.device.type == "cuda"
    state = torch_state.capture_rng()
    assert "cuda" in state
    expected = torch.rand(3, device=device)
    torch.cuda.manual_seed_all(5)
    torch_state.restore_rng(state)
    assert torch.equal(torch.rand(3, device=device), expected)
    assert sys.modules["torch"].cuda.is_initialized()


def test_autocast_state_inside_a_block_is_carried() -> None:
    settings = torch_state.TorchSettings()
    assert "autocast" not in settings.capture()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        captured = roundtrip(settings.capture())
    assert captured["autocast"][0] == 1  # one block deep
    settings.restore(captured)  # as a resumed process, inside the block again
    try:
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert (torch.nn.Linear(2, 2)(torch.ones(1, 2))).dtype == torch.bfloat16
    finally:
        settings.restore(settings.baseline or {})
    assert not torch.is_autocast_enabled("cpu")
    assert torch.autocast_increment_nesting() == 1
    torch.autocast_decrement_nesting()


def test_a_pause_inside_an_autocast_block_resumes_in_it(tmp_path: Any) -> None:
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from _harness import pause_at_line, resume_noted

    script = Path(__file__).parent / "torch_scripts" / "autocast_eval.py"
    script = Path(shutil.copy(script, tmp_path / script.name))
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr.decode()
    first, ckpt = pause_at_line(script, line=b"inside 3", cwd=tmp_path)
    rest, err, _notes = resume_noted(ckpt, tmp_path)
    assert first + rest == plain.stdout, err.decode()[-2000:]
    assert b"3 torch.bfloat16 True False\nafter False 0 True\n" in rest
