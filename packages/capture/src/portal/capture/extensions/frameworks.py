"""Training frameworks' objects whose own pickling is written for another purpose than a
checkpoint of the live program, carried as what they are in memory.

A pause inside ``trainer.fit()`` carries the framework's loop objects with its frames. Most
travel as pickle would take them; a few classes define ``__getstate__`` to be *sent* somewhere
(to a spawned worker process, say) and leave out what a live loop needs:

* Lightning's ``CombinedLoader`` iterators (``_ModeIterator`` and its subclasses:
  ``_MaxSizeCycle``, ``_MinSize``, ``_Sequential``, ``_MaxSize``) replace each DataLoader iterator
  they hold by ``None``: after a resume, ``next(data_fetcher)`` would fail with "'NoneType'
  object is not an iterator";
* a ``LightningModule`` drops its ``_trainer`` ("Net is not attached to a `Trainer`" at the
  next ``backward``);
* the ``_SignalConnector`` drops the handlers it replaced (Portal's ``SIGTERM`` among them), which
  it puts back when ``fit`` ends. Its ``received_sigterm`` comes back false: the ``SIGTERM`` it
  saw was the notice this checkpoint paused for (Lightning chains to Portal's handler), and on
  the new machine nothing is terminating; carried true, ``fit`` would stop at the next batch
  (``SIGTERMException``) right after the resume;
* the ``TQDMProgressBar`` drops its bars (which Portal carries: :mod:`.loops`);
* every torch optimizer (``torch.optim.Optimizer``) keeps only its defaults, state and parameter
  groups: its step hooks are made empty again, and the ``step`` an LR scheduler wrapped to see
  that the optimizer stepped is lost (the resumed scheduler then warns "Seems like
  `optimizer.step()` has been overridden after learning rate scheduler initialization").

Carried raw (their ``__dict__`` as it is, no code of theirs run: :mod:`portal.capture.rawstate`),
what they hold travels as any other value does (a DataLoader iterator re-created at its
position, a tqdm bar with its count).

Keyed by type name: registering imports nothing, and a program without Lightning pays nothing.

**accelerate's shared states.** ``PartialState``, ``AcceleratorState`` and ``GradientState`` keep
their state in a dict of the class (``_shared_state``) that every instance uses as its
``__dict__``. An instance the program holds brings it along (the pickler's shared-dict
instances), but the program need not hold one: ``Accelerator`` copies ``PartialState``'s
contents and keeps none, and accelerate's logging asks ``PartialState._shared_state`` whether
the state was made ("You must initialize the accelerate state by calling either
`PartialState()` or `Accelerator()` before using the logging utility" after a resume). So the
three dicts travel as process-level state (``accelerate_states``), by identity with any instance's,
and are filled again in the new process's classes.
"""

from __future__ import annotations

import sys
from typing import Any

from portal.capture.rawstate import raw_reduce
from portal.core.specs import CaptureExtensionSpec, SerializerSpec

__all__ = ["serializer_specs", "specs"]

_RAW = (
    "torch.optim.optimizer.Optimizer",
    *tuple(
        f"{package}.{name}"
        for package in ("lightning.pytorch", "pytorch_lightning")
        for name in (
            "utilities.combined_loader._ModeIterator",
            "core.module.LightningModule",
            "callbacks.progress.tqdm_progress.TQDMProgressBar",
        )
    ),
)


_SIGNAL_CONNECTORS = tuple(
    f"{package}.trainer.connectors.signal_connector._SignalConnector"
    for package in ("lightning.pytorch", "pytorch_lightning")
)


def _reduce_signal_connector(obj: Any) -> Any:
    make, made, (attrs, slots), *rest = raw_reduce(obj)
    if attrs and attrs.get("received_sigterm"):
        attrs = {**attrs, "received_sigterm": False}
    return (make, made, (attrs, slots), *rest)


def serializer_specs() -> list[SerializerSpec]:
    return [
        SerializerSpec(
            name="capture_frameworks",
            reducers={
                **dict.fromkeys(_RAW, raw_reduce),
                **dict.fromkeys(_SIGNAL_CONNECTORS, _reduce_signal_connector),
            },
            description="training frameworks' loop objects whose own pickling drops live state",
        )
    ]


_ACCELERATE_STATE = "accelerate.state"
_ACCELERATE_SHARED = ("PartialState", "AcceleratorState", "GradientState")


def _accelerate_states() -> dict[str, dict[str, Any]]:
    """The classes' shared dicts themselves (not copies): an instance's ``__dict__`` in the
    same pickle is the same object."""
    module = sys.modules[_ACCELERATE_STATE]
    states = {}
    for name in _ACCELERATE_SHARED:
        shared = getattr(getattr(module, name, None), "_shared_state", None)
        if isinstance(shared, dict):
            states[name] = shared
    return states


def _restore_accelerate_states(states: dict[str, dict[str, Any]]) -> None:
    module = sys.modules[_ACCELERATE_STATE]
    for name, contents in states.items():
        shared = getattr(getattr(module, name, None), "_shared_state", None)
        if isinstance(shared, dict) and shared is not contents:
            shared.update(contents)


def specs() -> list[CaptureExtensionSpec]:
    return [
        CaptureExtensionSpec(
            name="accelerate_states",
            capture=_accelerate_states,
            restore=_restore_accelerate_states,
            modules=(_ACCELERATE_STATE,),
            description="accelerate's shared states (PartialState, AcceleratorState, "
            "GradientState)",
        )
    ]
