"""Loop positions: a DataLoader iterator is re-created at its position (single-process and
worker processes), a tqdm bar continues at its count, and a training loop paused at random
moments and resumed in new processes prints byte for byte what an uninterrupted run prints."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
tqdm_module = pytest.importorskip("tqdm")

import torch.utils.data.dataloader as dataloader_module  # noqa: E402
from _harness import (  # noqa: E402
    EXIT_PAUSED,
    Chain,
    Segment,
    connect,
    pause_at_line,
    plain_run,
    resume_noted,
    roundtrip,
    runtime,
    short_dir,
)
from torch.utils.data import DataLoader, IterableDataset, TensorDataset  # noqa: E402

from portal.capture.extensions import loops  # noqa: E402

SCRIPTS = Path(__file__).parent / "torch_scripts"


@pytest.fixture(autouse=True)
def armed() -> None:
    loops.install(dataloader_module)  # as the runtime does when torch is imported


def batches(it: Any) -> list[list[int]]:
    return [b[0].tolist() for b in it]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_iterator_continues_with_the_next_batch_of_its_epoch(workers: int) -> None:
    torch.manual_seed(11)
    loader = DataLoader(
        TensorDataset(torch.arange(30)), batch_size=4, shuffle=True, num_workers=workers
    )
    it = iter(loader)
    seen = [next(it)[0].tolist() for _ in range(3)]
    state = torch.get_rng_state()
    resumed = roundtrip(it)
    assert torch.equal(torch.get_rng_state(), state)  # the replay drew nothing for good
    rest = batches(it)
    assert batches(resumed) == rest
    assert sorted(i for batch in seen + rest for i in batch) == list(range(30))


def test_a_resumed_iterator_can_be_checkpointed_again_and_the_next_epoch_is_the_same() -> None:
    gen = torch.Generator().manual_seed(5)
    loader = DataLoader(TensorDataset(torch.arange(20)), batch_size=3, shuffle=True, generator=gen)
    it = iter(loader)
    next(it)
    once = roundtrip({"it": it, "loader": loader})
    next(it)
    next(once["it"])
    twice = roundtrip({"it": once["it"], "loader": once["loader"]})
    assert batches(twice["it"]) == batches(it)
    # The loader's own generator went on as the original's: the next epoch's order agrees.
    assert batches(twice["loader"]) == batches(loader)


def test_an_iterator_not_yet_started_draws_its_order_when_first_asked() -> None:
    loader = DataLoader(TensorDataset(torch.arange(12)), batch_size=5, shuffle=True)
    torch.manual_seed(2)
    it = iter(loader)
    resumed = roundtrip(it)
    state = torch.get_rng_state()
    expected = batches(it)
    torch.set_rng_state(state)
    assert batches(resumed) == expected


class Stream(IterableDataset):  # type: ignore[type-arg]
    """A stream whose position is its generator's: seeded draws, in this module's namespace."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        g = torch.Generator().manual_seed(3)
        for i in range(self.n):
            yield i, torch.randint(0, 100, (3,), generator=g)


def _stream_batches(it: Any) -> list[Any]:
    return [(torch.as_tensor(i).tolist(), x.tolist()) for i, x in it]


@pytest.mark.parametrize(
    ("batch_size", "drop_last", "pin"),
    [(None, False, False), (4, False, True), (4, True, False)],
)
def test_an_iterable_datasets_loader_read_in_process_continues_at_its_position(
    batch_size: int | None, drop_last: bool, pin: bool
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_memory without an accelerator
        it = iter(
            DataLoader(Stream(23), batch_size=batch_size, drop_last=drop_last, pin_memory=pin)
        )
        seen = [next(it), next(it)]
        resumed = roundtrip(it)
        rest = _stream_batches(it)
        assert _stream_batches(resumed) == rest
    assert len(seen) + len(rest) == (23 if batch_size is None else (23 // 4 + (not drop_last)))


def test_an_iterable_dataset_read_by_workers_is_refused_with_the_way_out() -> None:
    it = iter(DataLoader(Stream(8), batch_size=2, num_workers=2))
    next(it)
    with pytest.raises(TypeError, match=r"IterableDataset read by 2 worker.*num_workers=0"):
        roundtrip(it)
    del it


def test_a_tqdm_bar_continues_at_its_count_without_drawing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import sys

    bar = tqdm_module.tqdm(
        total=10, file=sys.stderr, mininterval=0, miniters=1, bar_format="{n_fmt}/{total_fmt}|"
    )
    bar.update(4)
    loader = DataLoader(TensorDataset(torch.arange(9)), batch_size=2, shuffle=True)
    loop_bar = tqdm_module.tqdm(
        loader, file=sys.stderr, mininterval=0, miniters=1, bar_format="[{n_fmt}]"
    )
    gen = iter(loop_bar)
    next(gen)
    next(gen)
    capsys.readouterr()
    resumed = roundtrip({"bar": bar, "gen": gen})
    assert capsys.readouterr().err == ""  # rebuilding drew nothing
    assert resumed["bar"].n == 4 and resumed["bar"].total == 10
    assert isinstance(resumed["gen"], loops.BarIterator)
    expected = [b[0].tolist() for b in gen]
    drawn = capsys.readouterr().err
    assert [b[0].tolist() for b in resumed["gen"]] == expected
    # The same redraws in the same order (cursor moves differ: in this one process the original
    # bars still hold their screen lines, so the rebuilt ones draw on others).
    assert re.findall(r"\[\d\]", capsys.readouterr().err) == re.findall(r"\[\d\]", drawn)
    assert resumed["gen"].bar.n == loop_bar.n == 5  # every batch counted, as tqdm's loop does
    bar.close()
    resumed["bar"].close()


def test_a_bar_on_a_stream_of_this_process_is_refused() -> None:
    # (A StringIO holds nothing of the process's: it travels by value. A socket does not.)
    left, right = socket.socketpair()
    with left, right, left.makefile("w") as stream:
        bar = tqdm_module.tqdm(total=3, file=stream)
        with pytest.raises(TypeError, match="SocketIO"):
            roundtrip(bar)
        bar.close()


def _chain_pausing_at_steps(
    script: Path, cwd: Path, args: tuple[str, ...], steps: list[int], rng: random.Random
) -> Chain:
    """Run ``script`` under the runtime and pause it once its log file holds each of ``steps``
    lines (SIGTERM or a node request, at random), resuming each time in a new process. Waiting
    for the log rather than a clock puts every pause inside the loop, however slow the start."""
    work = short_dir()
    ckpt, sock, log = (
        os.path.join(work, "ck.portal"),
        os.path.join(work, "ctl.sock"),
        cwd / "train.log",
    )
    cmd = runtime("run", "--checkpoint", ckpt, "--control", sock, str(script), *args)
    env = {**os.environ, "STEP_SLEEP": "0.1"}  # time to see the log and pause between steps
    chain = Chain()
    for attempt in range(len(steps) + 1):
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env
        )
        control = connect(proc, sock, timeout=120)
        how = "none"
        if control is not None and attempt < len(steps):
            while proc.poll() is None and (
                not log.exists() or len(log.read_bytes().splitlines()) < steps[attempt]
            ):
                time.sleep(0.01)
            how = rng.choice(["sigterm", "node"])
            with contextlib.suppress(OSError):
                if how == "sigterm":
                    proc.send_signal(signal.SIGTERM)
                else:
                    control.pause()
        out, err = proc.communicate(timeout=300)
        if control is not None:
            control.close()
        chain.segments.append(Segment(proc.returncode, out, err, how))
        if proc.returncode != EXIT_PAUSED:
            break
        cmd = runtime("resume", "--control", sock, ckpt)
    return chain


@pytest.mark.parametrize("workers", [0, 2])
def test_training_loop_resumed_anywhere_prints_what_it_prints_uninterrupted(
    tmp_path: Path, rng: random.Random, workers: int
) -> None:
    """Shuffling DataLoader (in-process, then with 2 worker processes), dropout, Adam, a tqdm
    bar on stderr, a log file, changed torch settings: paused twice in its loop (24 steps over
    2 epochs) and resumed, it prints byte for byte what it prints uninterrupted, stdout (the
    losses, the batches' sample indices, the random draws, the settings, the log file) and
    stderr (the bar). The job's working directory is not under the script's, as on a node.
    (Under it, torch's ``torch.ops`` pseudo-module, whose ``__file__`` is the relative
    "_ops.py", would count as a user module: a usercode.py issue, reported separately.)"""
    plain, paused, code = tmp_path / "plain", tmp_path / "paused", tmp_path / "code"
    for directory in (plain, paused, code):
        directory.mkdir()
    script = Path(shutil.copy(SCRIPTS / "train_loop.py", code / "train_loop.py"))
    expected = plain_run(script, str(workers), cwd=plain)
    assert expected.returncode == 0, expected.stderr.decode()
    steps = sorted(rng.sample(range(1, 24), 2))
    chain = _chain_pausing_at_steps(script, paused, (str(workers),), steps, rng)
    trail = [(s.rc, s.how) for s in chain.segments]
    assert chain.segments[-1].rc == 0, (steps, trail, chain.stderr.decode()[-3000:])
    assert all(s.rc == EXIT_PAUSED for s in chain.segments[:-1]), (steps, trail)
    assert chain.pauses >= 1, (steps, trail)  # a pause can only miss if the loop outran it
    assert chain.stdout == expected.stdout, (steps, trail)
    assert chain.stderr == expected.stderr, (steps, trail)


def test_a_closed_bar_stays_out_of_the_live_bars() -> None:
    """A bar closed before the pause comes back closed: the next bar takes its screen line."""
    import sys

    done = tqdm_module.tqdm(range(3), file=sys.stderr, disable=False)
    for _ in done:
        pass
    resumed = roundtrip(done)
    assert resumed.disable and resumed.n == 3
    assert resumed not in tqdm_module.tqdm._instances
    fresh = tqdm_module.tqdm(total=1, file=sys.stderr)
    assert fresh.pos == 0
    fresh.close()


PIN_MEMORY_SCRIPT = """\
import time
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=4, pin_memory=True)
for epoch in range(3):
    for step, (x,) in enumerate(loader):
        print(f"epoch {epoch} step {step} {float(x.sum())}", flush=True)
        time.sleep(0.01)
"""
PIN_MEMORY_WARNING = b"'pin_memory' argument is set as true"


def test_a_loaders_warning_is_torchs_own_and_given_once_across_a_resume(tmp_path: Path) -> None:
    """torch warns at each epoch's iterator (no accelerator here); a plain run shows it once,
    naming torch's line. Under the runtime the same, with no notice; and a run paused in its
    first epoch and resumed shows it once in all, as the uninterrupted run: the resumed process
    knows it was shown (the new epochs' iterators stay quiet), and the iterator re-made at the
    resume gives it no second time."""
    script = tmp_path / "pinned.py"
    script.write_text(PIN_MEMORY_SCRIPT)
    plain = plain_run(script)
    assert plain.returncode == 0 and plain.stderr.count(PIN_MEMORY_WARNING) == 1, plain.stderr
    assert b"dataloader.py" in plain.stderr
    ckpt = tmp_path / "ck.portal"
    under = subprocess.run(
        runtime("run", "--checkpoint", str(ckpt), str(script)),
        capture_output=True, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert under.returncode == 0 and under.stdout == plain.stdout
    assert under.stderr == plain.stderr  # no footprint: not a line of Portal's
    first, paused = pause_at_line(script, line=b"epoch 0 step 5", cwd=tmp_path)
    rest, err, _ = resume_noted(paused, tmp_path)
    assert first + rest == plain.stdout
    assert err.count(PIN_MEMORY_WARNING) == 0, err.decode()


def test_a_pretraining_stream_paused_anywhere_resumes_identical(
    tmp_path: Path, rng: random.Random
) -> None:
    """llama2.c's loader shape (an IterableDataset's generator over ``np.memmap`` shards, read
    in process, under a generator of the script's advanced by ``next()``): paused twice at
    random steps and resumed, stdout (losses, each next batch's tokens, the final weights) and
    stderr equal an uninterrupted run's. It was refused at every safe point before."""
    plain, paused, code = tmp_path / "plain", tmp_path / "paused", tmp_path / "code"
    for directory in (plain, paused, code):
        directory.mkdir()
    script = Path(shutil.copy(SCRIPTS / "pretok_stream.py", code / "pretok_stream.py"))
    expected = plain_run(script, cwd=plain)
    assert expected.returncode == 0, expected.stderr.decode()
    steps = sorted(rng.sample(range(1, 29), 2))
    chain = _chain_pausing_at_steps(script, paused, (), steps, rng)
    trail = [(s.rc, s.how) for s in chain.segments]
    assert chain.segments[-1].rc == 0, (steps, trail, chain.stderr.decode()[-3000:])
    assert chain.pauses == 2, (steps, trail, chain.stderr.decode()[-3000:])
    assert chain.stdout == expected.stdout, (steps, trail)
    assert chain.stderr == expected.stderr, (steps, trail)
