"""Loop positions: ``for batch in loader`` over a torch DataLoader, and tqdm progress bars.

**DataLoader.** A loader's iterator cannot travel: its workers are processes, its sampler
iterator a generator. It is *re-created at the same position* instead. What decides an epoch's
order is the state of the random generators when the iterator asked its sampler for indices, so
an import hook on ``torch.utils.data.dataloader`` gives ``_BaseDataLoaderIter`` a ``__new__``
and wraps two of its methods to note, per epoch, the states of the generators involved (torch's
default generator, the loader's and the samplers' own) right before ``iter(sampler)`` and right
before the first ``next()``; a few kilobytes, once an epoch. The checkpoint holds the loader, those states and the
number of batches yielded. On resume the sampler is run again under the noted states (indices
only: no sample is loaded) and the skipped batches are dropped; the new iterator (and its
workers, seeded with the same base seed) continues with the next batch of the same order. The
generators are put back as the checkpoint left them afterwards, so the replay has no effect on
the program. An IterableDataset's position is inside its own iterator: read in this process
(``num_workers=0``, the shape of llama2.c's and most pre-training loaders) that iterator is an
object of the program's, a generator of the dataset's ``__iter__`` as a rule, and the DataLoader's
iterator travels as it is with it (:mod:`portal.capture.rawstate`: torch's iterator refuses
pickling). A dataset that says where it stands (``state_dict`` and ``load_state_dict``,
torchdata's Stateful protocol: a Hugging Face streaming ``IterableDataset`` is one, whose
iterator holds a pyarrow reader no pickle can carry, so its pause waited for the epoch's end)
travels as that state instead, and the iterator is made again after the dataset loads it. Read
by worker processes it is refused, named, with the way out: each worker holds its own position
in a process that does not travel.

**torchdata's StatefulDataLoader** says where it stands itself: its iterator's ``state_dict()``
holds the sampler's position and, read by workers, each worker's dataset state (an
IterableDataset's own ``state_dict``, or the count torchdata fast-forwards by), as of the last
batch the program received. Its iterator travels as that state and is made again by the loader's
``load_state_dict`` and ``iter``: new workers start where the old ones stood, with the same base
seed, so a stream of shards read by workers continues at its next batch. (Through torch's own
path above, a resumed StatefulDataLoader iterator failed to construct and the job was lost.)

The iterator's ``__init__`` stays torch's own: a warning it gives (``pin_memory`` on a machine
with no accelerator) names the line of torch's that made the iterator, as in a plain run, not a
wrapper of Portal's. Only the re-creation at a resume wraps it, with its warnings silenced: the
first process gave them already, and an uninterrupted run would not give them again.

**tqdm.** A bar travels by value without its output stream's wrapper and writer, which are
re-made on the same stream (``sys.stderr``/``sys.stdout`` by reference), with its count, totals
and times (elapsed time continues from the checkpoint; the paused time is not counted). Rebuilt
silently: a resumed bar draws nothing until the program advances it, so the output reads as if
the program never stopped. A ``for x in tqdm(...)`` loop holds tqdm's own generator; it becomes
a :class:`BarIterator` doing exactly what tqdm's loop does, from the same position.
"""

from __future__ import annotations

import inspect
import itertools
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from portal.capture import frames
from portal.capture.extensions._imports import when_imported
from portal.capture.rawstate import raw_reduce
from portal.core.specs import CaptureExtensionSpec, SerializerSpec

__all__ = [
    "BarIterator",
    "Epoch",
    "install",
    "rebuild_stateful_dataset_iterator",
    "rebuild_stateful_iterator",
    "serializer_specs",
    "specs",
]

_DATALOADER = "torch.utils.data.dataloader"
_STATEFUL = "torchdata.stateful_dataloader.stateful_dataloader"
_PATCHED = "_portal_patched"

# -- DataLoader: recording each epoch's start ------------------------------------------------

GeneratorStates = list[tuple[Any, Any]]  # (torch.Generator, its get_state())


class Epoch:
    """How one epoch's index order was drawn: the generators' states before ``iter(sampler)``
    and before the first ``next()`` (None until the iterator asked for its first batch)."""

    __slots__ = ("at_first", "at_iter")

    def __init__(self, at_iter: GeneratorStates, at_first: GeneratorStates | None = None) -> None:
        self.at_iter = at_iter
        self.at_first = at_first

    def __reduce__(self) -> Any:
        return (Epoch, (self.at_iter, self.at_first))


def _generators(loader: Any) -> list[Any]:
    """torch's default generator and every Generator the loader and its samplers hold."""
    torch = sys.modules["torch"]
    found = [torch.default_generator]
    todo = [loader.generator, loader.sampler, loader.batch_sampler]
    seen: set[int] = set()
    while todo:
        obj = todo.pop()
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Generator):
            if all(obj is not g for g in found):
                found.append(obj)
        elif hasattr(obj, "__dict__") and len(seen) < 16:  # samplers wrapping samplers
            todo += [v for k, v in vars(obj).items() if k in ("generator", "sampler")]
    return found


def _states(generators: list[Any]) -> GeneratorStates:
    return [(g, g.get_state()) for g in generators]


def _apply(states: GeneratorStates) -> None:
    for generator, state in states:
        generator.set_state(state)


class _Resuming:
    """Set while a checkpointed iterator is re-created: what its patched methods install."""

    def __init__(self, epoch: Epoch, sampler_iter: Iterator[Any], base_seed: int) -> None:
        self.epoch = epoch
        self.sampler_iter = sampler_iter
        self.base_seed = base_seed


_resuming: _Resuming | None = None


def install(module: Any) -> None:
    """Patch ``_BaseDataLoaderIter`` of ``module`` (torch.utils.data.dataloader), once."""
    base = module._BaseDataLoaderIter
    if getattr(base, _PATCHED, False):
        return
    reset, next_index = base._reset, base._next_index

    def __new__(cls: type, loader: Any = None, *args: Any, **kwargs: Any) -> Any:
        # Before torch's __init__ (which draws the base seed), and off the stack while it runs.
        self: Any = object.__new__(cls)
        if loader is not None:  # (None: a copy or unpickling making a bare instance)
            generators = _generators(loader)
            self._portal_loader = loader
            self._portal_generators = generators
            self._portal_epoch = Epoch(_states(generators))
        return self

    def _reset(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
        start = _states(self._portal_generators)
        reset(self, loader, *args, **kwargs)
        if _resuming is not None:  # a multi-process iterator's first reset, inside __init__
            self._sampler_iter = _resuming.sampler_iter
            self._portal_epoch = _resuming.epoch
        else:
            self._portal_epoch = Epoch(start)

    def _next_index(self: Any) -> Any:
        epoch = self.__dict__.get("_portal_epoch")
        if epoch is not None and epoch.at_first is None:
            epoch.at_first = _states(self._portal_generators)
        return next_index(self)

    base.__new__ = __new__
    base._reset = _reset
    base._next_index = _next_index
    setattr(base, _PATCHED, True)


def reduce_loader_iterator(it: Any) -> Any:
    """A DataLoader iterator as (loader, epoch, batches yielded, base seed)."""
    module = sys.modules[_DATALOADER]
    epoch = it.__dict__.get("_portal_epoch")
    if epoch is None:
        raise _unarmed()
    if it._dataset_kind != module._DatasetKind.Map:
        if it._num_workers == 0:
            dataset = it._portal_loader.dataset
            if _says_where_it_stands(dataset):
                return (
                    rebuild_stateful_dataset_iterator,
                    (it._portal_loader, dataset.state_dict(), it._num_yielded),
                )
            # The position is the dataset's own iterator (a generator of its ``__iter__``, say),
            # an object of this process: the iterator travels as it is, with it.
            return raw_reduce(it)
        raise TypeError(
            f"cannot carry an iterator over an IterableDataset read by {it._num_workers} worker "
            "processes: each worker's position lies inside its own copy of the dataset's "
            "iterator, in a process that does not travel. Give the DataLoader num_workers=0 "
            "(its position then travels with the program), read it with torchdata's "
            "StatefulDataLoader (each worker's position comes back through its state_dict), use "
            "a map-style Dataset (with __getitem__), or pause between epochs"
        )
    return (
        _rebuild_loader_iterator,
        (type(it), it._portal_loader, epoch, it._num_yielded, it._base_seed),
    )


def _says_where_it_stands(dataset: Any) -> bool:
    """Whether ``dataset`` keeps its own position (torchdata's Stateful protocol)."""
    return callable(getattr(dataset, "state_dict", None)) and callable(
        getattr(dataset, "load_state_dict", None)
    )


def _iter_after(loader: Any, load: Callable[[Any], object], state: Any) -> Any:
    """``iter(loader)`` once ``load(state)`` put back where it stood; the generators left as
    they were (making an iterator draws a base seed the state already holds), and the
    warnings making it gives silenced (the first process gave them)."""
    saved = _states(_generators(loader))
    try:
        load(state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return iter(loader)
    finally:
        _apply(saved)


def rebuild_stateful_dataset_iterator(loader: Any, state: Any, num_yielded: int) -> Any:
    """An in-process iterator over a dataset that said where it stood: the dataset loads that
    state and the loader makes its iterator again."""
    it = _iter_after(loader, loader.dataset.load_state_dict, state)
    it._num_yielded = num_yielded
    return it


def _unarmed() -> TypeError:
    return TypeError(
        "cannot carry this DataLoader iterator: it was created before Portal's runtime was "
        "armed, so the epoch's order is unknown. Run the script with `portal run`"
    )


def reduce_stateful_iterator(it: Any) -> Any:
    """A torchdata StatefulDataLoader's iterator as (its loader, its own ``state_dict()``)."""
    loader = it.__dict__.get("_portal_loader")
    if loader is None:
        raise _unarmed()
    return (rebuild_stateful_iterator, (loader, it.state_dict()))


def rebuild_stateful_iterator(loader: Any, state: dict[str, Any]) -> Any:
    """The iterator again, by torchdata's own protocol (the loader's ``load_state_dict``)."""
    return _iter_after(loader, loader.load_state_dict, state)


def _replay(index_sampler: Any, epoch: Epoch, skip: int) -> Iterator[Any]:
    """The sampler's iterator as it was after ``skip`` batches, its generators left untouched."""
    generators = [g for g, _ in itertools.chain(epoch.at_iter, epoch.at_first or ())]
    saved = _states(list({id(g): g for g in generators}.values()))
    try:
        _apply(epoch.at_iter)
        it: Iterator[Any] = iter(index_sampler)
        if epoch.at_first is None:
            return it  # no index drawn yet: it draws from the live state, as it would have
        _apply(epoch.at_first)
        first = next(it, _END)
        if first is _END:
            return iter(())
        stream = itertools.chain((first,), it)
        for _ in itertools.islice(stream, skip):
            pass
        return stream
    finally:
        _apply(saved)


_END = object()


def _rebuild_loader_iterator(
    cls: type, loader: Any, epoch: Epoch, num_yielded: int, base_seed: int
) -> Any:
    global _resuming
    install(sys.modules[_DATALOADER])
    sampler_iter = _replay(loader._index_sampler, epoch, num_yielded)
    # Constructing draws a base seed the checkpoint already has: put the generators back after.
    saved = _states(_generators(loader))
    _resuming = _Resuming(epoch, sampler_iter, base_seed)
    base = sys.modules[_DATALOADER]._BaseDataLoaderIter
    init = base.__init__

    def resuming_init(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
        with warnings.catch_warnings():  # given by the first process; torch's init forks none
            warnings.simplefilter("ignore")
            init(self, loader, *args, **kwargs)
        self._base_seed = base_seed  # before a multi-process iterator's workers start
        self._sampler_iter = sampler_iter
        self._portal_epoch = epoch

    base.__init__ = resuming_init
    try:
        it = cls(loader)
    finally:
        base.__init__ = init
        _resuming = None
        _apply(saved)
    it._num_yielded = num_yielded
    return it


def reduce_loader(loader: Any) -> Any:
    """A DataLoader without its cached persistent-workers iterator (whose workers are this
    process's): the resumed loader starts new ones at its next epoch."""
    rv = loader.__reduce_ex__(5)
    if len(rv) < 3 or not isinstance(rv[2], dict) or rv[2].get("_iterator") is None:
        return NotImplemented
    state = dict(rv[2])
    state["_iterator"] = None
    if state.get("_initial_iter_for_state_dict"):  # torchdata's: that iterator is not carried
        state["_initial_iter_for_state_dict"] = False
    return (rv[0], rv[1], state, *rv[3:])


# -- tqdm -------------------------------------------------------------------------------------

_BAR_SKIPPED = ("fp", "sp", "pos", "_time", "start_t", "last_print_t")


def _stream_of(bar: Any) -> Any:
    fp = bar.fp
    return getattr(fp, "_wrapped", fp)  # tqdm wraps the stream in DisableOnWriteError


def reduce_bar(bar: Any) -> Any:
    now = time.time()
    state = {k: v for k, v in vars(bar).items() if k not in _BAR_SKIPPED}
    ago = (now - bar.start_t, now - bar.last_print_t)
    return (_rebuild_bar, (type(bar), _stream_of(bar), ago, bool(bar.disable)), state)


def _rebuild_bar(cls: type, stream: Any, ago: tuple[float, float], disabled: bool = False) -> Any:
    # delay=inf: tqdm draws at construction otherwise; the state restored after sets it back.
    # A closed (or disabled) bar is built disabled: tqdm then keeps it out of its list of live
    # bars, which would otherwise push every later bar one line down.
    bar = cls(file=stream, delay=float("inf"), leave=False, disable=disabled)
    now = time.time()
    bar.start_t = now - ago[0]
    bar.last_print_t = now - ago[1]
    return bar


class BarIterator:
    """tqdm's ``for obj in bar`` loop, continued from a checkpoint: each step counts the object
    the loop body just had and redraws the bar when tqdm's own loop would (same test of
    ``miniters``, ``mininterval`` and ``delay``)."""

    def __init__(
        self, bar: Any, source: Iterator[Any], n: int, last_print_n: int, pending: bool
    ) -> None:
        self.bar = bar
        self.source = source
        self.n = n
        self.last_print_n = last_print_n
        self.pending = pending  # an object was handed out and is not counted yet
        self.done = False

    def __iter__(self) -> BarIterator:
        return self

    def __next__(self) -> Any:
        if self.done:
            raise StopIteration
        if self.pending:
            self._count()
        try:
            obj = next(self.source)
        except StopIteration:
            self.done = True
            self.bar.n = self.n
            self.bar.close()
            raise
        self.pending = True
        return obj

    def _count(self) -> None:
        bar = self.bar
        self.n += 1
        if self.n - self.last_print_n >= bar.miniters:
            now = bar._time()
            if now - bar.last_print_t >= bar.mininterval and now >= bar.start_t + bar.delay:
                bar.update(self.n - self.last_print_n)
                self.last_print_n = bar.last_print_n
        self.pending = False

    def __reduce__(self) -> Any:
        return (BarIterator, (self.bar, self.source, self.n, self.last_print_n, self.pending))


def reduce_bar_generator(gen: Any) -> Any:
    """tqdm's ``__iter__`` generator, suspended in a ``for`` loop, as a :class:`BarIterator`."""
    state = inspect.getgeneratorstate(gen)
    if state == inspect.GEN_CLOSED:
        return (iter, ((),))
    bar = gen.gi_frame.f_locals["self"]
    if state == inspect.GEN_CREATED:
        return (_fresh_bar_iterator, (bar,))
    if gen.gi_yieldfrom is not None:  # a disabled bar: `yield from iterable`
        return (iter, (gen.gi_yieldfrom,))
    local = gen.gi_frame.f_locals
    _slots, stack = frames.read_slots_and_stack(gen.gi_frame)
    source = next((v for v in stack if hasattr(v, "__next__")), None)
    if source is None:
        raise TypeError("cannot carry this tqdm loop: its iterator was not found on its frame")
    return (BarIterator, (bar, source, local["n"], local["last_print_n"], True))


def _fresh_bar_iterator(bar: Any) -> Any:
    return iter(bar)


def serializer_specs() -> list[SerializerSpec]:
    return [
        SerializerSpec(
            name="capture_loops",
            reducers={
                f"{_DATALOADER}._BaseDataLoaderIter": reduce_loader_iterator,
                f"{_DATALOADER}.DataLoader": reduce_loader,
                f"{_STATEFUL}._StatefulBaseDataLoaderIter": reduce_stateful_iterator,
                "tqdm.std.tqdm": reduce_bar,
                "tqdm.std.tqdm.__iter__": reduce_bar_generator,
            },
            description="DataLoader iterators re-created at their position (torchdata's "
            "StatefulDataLoader by its own state_dict); tqdm bars",
        )
    ]


def specs() -> list[CaptureExtensionSpec]:
    """No state of its own (positions travel in the pickle): arms the DataLoader hook, so epochs
    are recorded from torch's import on. Called when the plugins load, before the script runs."""
    when_imported(_DATALOADER, install)
    return []
