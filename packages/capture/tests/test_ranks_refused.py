"""What a rank's checkpoint refuses by name (sharded or remote state, ``refused.py``), and the
per-group agreement of the ballot (ranks outside a group have no say in it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from portal.capture.distributed.ballot import NOT_MEMBER, agreeing, is_ahead


def test_counts_agree_per_group_among_its_members() -> None:
    # Group 0 (the default) has everyone; group 1 ranks 0 and 1; group 2 ranks 1 and 2.
    assert agreeing([(5, 2, NOT_MEMBER), (5, 2, 7), (5, NOT_MEMBER, 7)]) == (5, 2, 7)
    assert agreeing([(5, 2, NOT_MEMBER), (5, 3, 7), (5, NOT_MEMBER, 7)]) is None
    assert agreeing([(4, NOT_MEMBER), (4, NOT_MEMBER)]) == (4, NOT_MEMBER)
    # A peer ahead only in a group this rank is not in does not hold this rank up.
    assert not is_ahead((5, NOT_MEMBER, 9), (5, 2, NOT_MEMBER))
    assert is_ahead((5, 3, NOT_MEMBER), (5, 2, 7))


@pytest.mark.filterwarnings("ignore:.*torch.jit.*:DeprecationWarning")
def test_zero_is_refused_by_name_with_the_way_out(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from portal.capture.distributed.ddp import DistributedUnsupportedError
    from portal.capture.distributed.rank import distributed_reducers
    from portal.capture.pickler import dumps, resolve_reducers

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        model = torch.nn.Linear(4, 4)
        zero = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1)
        reducers = resolve_reducers(distributed_reducers())
        with pytest.raises(DistributedUnsupportedError) as refused:
            dumps({"optimizer": zero}, namespaces={}, reducers=reducers)
        assert refused.value.code == "CAPTURE_DISTRIBUTED_UNSUPPORTED"
        assert "ZeRO" in str(refused.value) and "torch.distributed.checkpoint" in str(refused.value)
        # The group itself travels as a reference ("the default group"), never refused.
        dumps({"group": dist.group.WORLD}, namespaces={}, reducers=reducers)
        # A store other than a TCPStore cannot come back: refused by its name.
        with pytest.raises(DistributedUnsupportedError, match="FileStore kept by the program"):
            dumps({"store": store}, namespaces={}, reducers=reducers)
    finally:
        dist.destroy_process_group()


def test_a_set_from_another_torch_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import subprocess
    import sys
    import time

    import msgspec

    from portal.capture.image import CheckpointImage, Header, InterpreterInfo, write_image
    from portal.runtime.rankset import PartEntry, SetManifest

    manifest = SetManifest(
        world_size=2,
        parts=[PartEntry(rank=r, bytes=1, paused_at="train.py:3 in <module>") for r in (0, 1)],
        torch="1.0.0",
    )
    header = Header(
        interpreter=InterpreterInfo.current(),
        script=str(tmp_path / "train.py"),
        argv=["train.py"],
        cwd=str(tmp_path),
        created=time.time(),
        ranks=2,
    )
    path = tmp_path / "job.portal"
    write_image(
        CheckpointImage(
            header=header,
            pickle=msgspec.json.encode(manifest),
            buffers=[memoryview(b"0"), memoryview(b"1")],
        ),
        path,
    )
    done = subprocess.run(
        [sys.executable, "-m", "portal.runtime", "resume", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 65, done.stderr
    assert "[CAPTURE_RANK_SET_MISMATCH]" in done.stderr and "torch 1.0.0" in done.stderr
    assert "Traceback" not in done.stderr
