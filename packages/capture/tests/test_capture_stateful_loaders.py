"""Loaders that say where they stand. torchdata's StatefulDataLoader, read by worker processes:
its iterator travels as its own ``state_dict()`` and is made again by the loader's
``load_state_dict``, so a stream of shards read by two workers continues at its next batch,
mid-epoch, and a shuffled map-style dataset at the next batch of the same order. Before, a
stream read by workers could pause only between epochs (the pause waited for the loop to end),
and a shuffled one was lost at the resume (torch's own path could not construct torchdata's
iterator). An IterableDataset with a ``state_dict`` read in process by torch's DataLoader (a
Hugging Face streaming dataset, whose iterator holds a pyarrow reader) travels as that state:
it paused only at the epoch's end before.
torch, torchdata and datasets (noxfile.py's FRAMEWORK_PINS): Python 3.11, skipped elsewhere."""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

import torch.utils.data.dataloader as dataloader_module  # noqa: E402
from _harness import CORPUS, paused_against_plain, roundtrip  # noqa: E402
from torch.utils.data import IterableDataset, get_worker_info  # noqa: E402

from portal.capture.extensions import loops  # noqa: E402

# torchdata 0.11 calls torch.set_vital, which torch 2.13 deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")


@pytest.fixture(autouse=True)
def armed() -> None:
    loops.install(dataloader_module)  # as the runtime does when torch is imported


class Counted(IterableDataset):  # type: ignore[type-arg]
    """Each worker's share of 0..n-1, its position reported by ``state_dict`` (torchdata's
    Stateful protocol) and nowhere the main process can see."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.done = 0

    def state_dict(self) -> dict[str, int]:
        return {"done": self.done}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.done = state["done"]

    def __iter__(self) -> Any:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        mine = list(range(worker, self.n, workers))
        while self.done < len(mine):
            self.done += 1
            yield mine[self.done - 1]


@pytest.mark.parametrize(("workers", "persistent"), [(0, False), (2, False), (2, True)])
def test_a_stream_read_by_workers_continues_at_its_next_batch(
    workers: int, persistent: bool
) -> None:
    loader = stateful.StatefulDataLoader(
        Counted(40), batch_size=3, num_workers=workers, persistent_workers=persistent
    )
    it = iter(loader)
    seen = [next(it).tolist() for _ in range(5)]
    resumed = roundtrip({"loader": loader, "it": it})
    rest = [b.tolist() for b in it]
    assert [b.tolist() for b in resumed["it"]] == rest
    assert sorted(i for b in seen + rest for i in b) == list(range(40))
    # The next epoch of the resumed loader is the original's next epoch.
    assert [b.tolist() for b in resumed["loader"]] == [b.tolist() for b in loader]


def test_a_shuffled_dataset_read_by_workers_continues_in_the_same_order() -> None:
    torch.manual_seed(3)
    loader = stateful.StatefulDataLoader(
        torch.utils.data.TensorDataset(torch.arange(30)), batch_size=4, shuffle=True, num_workers=2
    )
    it = iter(loader)
    seen = [next(it)[0].tolist() for _ in range(3)]
    state = torch.get_rng_state()
    resumed = roundtrip(it)
    assert torch.equal(torch.get_rng_state(), state)  # the rebuild drew nothing for good
    rest = [b[0].tolist() for b in it]
    assert [b[0].tolist() for b in resumed] == rest
    assert sorted(i for b in seen + rest for i in b) == list(range(30))


class Unpicklable(Counted):
    """A stream whose iterator holds what no pickle carries (a reader of a library's, say), and
    which says where it stands."""

    def __iter__(self) -> Any:
        reader = threading.Lock()  # as a pyarrow reader: cannot be pickled
        with reader:
            yield from super().__iter__()


def test_an_iterable_dataset_that_says_where_it_stands_travels_as_its_state() -> None:
    loader = torch.utils.data.DataLoader(Unpicklable(30), batch_size=4)
    it = iter(loader)
    seen = [next(it).tolist() for _ in range(3)]
    state = torch.get_rng_state()
    resumed = roundtrip({"loader": loader, "it": it})
    assert torch.equal(torch.get_rng_state(), state)  # the rebuild drew nothing for good
    rest = [b.tolist() for b in it]
    assert [b.tolist() for b in resumed["it"]] == rest
    assert sorted(i for b in seen + rest for i in b) == list(range(30))
    assert resumed["it"]._num_yielded == 3 + len(rest)


def test_a_loader_asked_for_its_state_before_its_loop_travels() -> None:
    """``loader.state_dict()`` before the first ``iter`` makes (and keeps) an iterator for that
    loop, with its workers: that iterator stays behind, and the resumed loader makes its own."""
    loader = stateful.StatefulDataLoader(Counted(10), batch_size=2, num_workers=2)
    loader.state_dict()
    resumed = roundtrip(loader)
    assert sorted(i for b in resumed for i in b.tolist()) == list(range(10))


@pytest.mark.parametrize("shape", ["stream", "shuffled"])
def test_a_training_loop_over_a_stateful_loader_pauses_mid_epoch_and_resumes_identical(
    tmp_path: Path, shape: str
) -> None:
    """The pause comes at the next line, mid-epoch (an epoch is 15 batches), and the resumed
    run prints what an uninterrupted run prints: the same batches, losses and weights."""
    run = paused_against_plain(
        tmp_path,
        CORPUS / "loaders" / "stateful_workers.py",
        shape,
        ready=lambda out: out.count(b"step ") >= 4,
        env={**os.environ, "STEP_SLEEP": "0.1"},
    )
    assert run.out == run.plain.stdout, run.err.decode()[-2000:]
    assert run.paused_out.count(b"step ") < 15, run.paused_out.decode()


_HF_ENV = {  # the datasets library reads local files only: nothing leaves the machine
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "STEP_SLEEP": "0.1",
}


@pytest.mark.skipif(
    importlib.util.find_spec("datasets") is None,
    reason="needs datasets (noxfile.py's FRAMEWORK_PINS)",
)
@pytest.mark.parametrize("shape", ["plain", "stateful"])
def test_a_hugging_face_streaming_dataset_pauses_mid_epoch_and_resumes_identical(
    tmp_path: Path, shape: str
) -> None:
    """``load_dataset(..., streaming=True)`` read by torch's DataLoader in process, or by two
    workers of torchdata's: paused at the next line (an epoch is 25 batches; before, the pause
    waited for its end), and the resumed run prints what an uninterrupted run prints."""
    run = paused_against_plain(
        tmp_path,
        CORPUS / "loaders" / "hf_stream.py",
        shape,
        ready=lambda out: out.count(b"step ") >= 4,
        env={**os.environ, **_HF_ENV, "HF_HOME": str(tmp_path / "hf")},
    )
    assert run.out == run.plain.stdout, run.err.decode()[-2000:]
    assert run.paused_out.count(b"step ") < 20, run.paused_out.decode()
