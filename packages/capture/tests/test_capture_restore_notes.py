"""What a restore does otherwise than the checkpoint left it reaches the node: GPU tensors that
arrive on a machine without a GPU are restored onto the CPU, said on stderr and in the runtime's
greeting (``Hello.notes``), which the node turns into the job's ``restore-note`` event."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from _harness import EXIT_PAUSED, connect, runtime, short_dir

torch = pytest.importorskip("torch")

from portal.capture.extensions.tensors import CPU_NOTE  # noqa: E402

# A storage saved on cuda:0, as a GPU machine's checkpoint holds it: the value pickles exactly as
# the tensors extension writes a CUDA storage (its bytes and its device), so the restore path is
# the real one though this machine has no GPU to make one.
SCRIPT = """
import copyreg, os, signal, time
import torch  # noqa: F401  (a GPU job has it loaded)
from portal.capture.extensions import tensors
from portal.runtime import rt

class SavedOnGpu:
    pass

copyreg.pickle(
    SavedOnGpu, lambda _: (tensors._rebuild_storage, (bytearray(b"\\x01\\x02\\x03"), "cuda:0"))
)

storage = SavedOnGpu()
if rt.active:
    os.kill(os.getpid(), signal.SIGTERM)
time.sleep(1.0)  # long enough for the test to connect as the node does
print(type(storage).__name__, storage.device, storage.nbytes(), flush=True)
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: no CPU fallback")
def test_gpu_tensors_restored_on_the_cpu_are_noted_for_the_node(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(textwrap.dedent(SCRIPT))
    ckpt = tmp_path / "job.portal"
    first = subprocess.run(
        runtime("run", "--checkpoint", str(ckpt), "job.py"),
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
    )
    assert first.returncode == EXIT_PAUSED, first.stderr.decode()

    sock = os.path.join(short_dir(), "c.sock")
    proc = subprocess.Popen(
        runtime("resume", "--checkpoint", str(tmp_path / "next.portal"), str(ckpt)),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PORTAL_RUNTIME_CONTROL": sock},
    )
    control = connect(proc, sock)
    try:
        assert control is not None
        assert control.hello["notes"] == [CPU_NOTE]
    finally:
        out, err = proc.communicate(timeout=60)
        if control is not None:
            control.close()
    assert proc.returncode == 0, err.decode()
    assert out.decode() == "UntypedStorage cpu 3\n"
    assert err.decode().count(f"portal: {CPU_NOTE}") == 1
