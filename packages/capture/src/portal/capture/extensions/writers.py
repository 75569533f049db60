"""Event writers that own a thread: TensorBoard's event file writer, as ``SummaryWriter`` (torch's
``torch.utils.tensorboard``, and Hugging Face's and Lightning's TensorBoard loggers through it)
holds one.

An ``EventFileWriter`` writes through a queue and a daemon thread (``_AsyncWriter``): the queue's
locks, the thread and the open event file are the process's own, so pickle refuses it and a
training script holding a ``SummaryWriter`` in a global never reached a pause. It travels as
what it writes to instead: at the pause the queue is flushed (everything added so far is in the
file, which travels with the working directory), and the resumed process makes the writer again
around the *same* event file, opened for appending, with the same queue size and flush interval.
TensorBoard then reads one file holding every event, as an uninterrupted run leaves it.

A file that is not there at the resume (its log directory was outside the job's working
directory, and the job moved to a new machine) gets a new event file in the same directory, as a
new writer would make.

**tensorboardX**'s ``EventFileWriter`` writes through a ``multiprocessing.Queue`` (a feeder
thread and a pipe) and a writer thread, and its ``flush()`` leaves the queue as it is. At the
pause its writer thread is stopped, which writes every event queued before the stop, the file is
flushed, and a new writer thread takes over at once (a periodic checkpoint leaves the writer
running). It travels re-made (:mod:`portal.capture.remade`): a new queue and writer thread around
its ``EventsWriter``, which travels as a value with its open event file (reopened where it stood
by ``capture_files``: a log directory outside the job's working directory is named as such).

The rebuild functions' names are part of the checkpoint format: rename none of them.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from portal.capture.extensions.workdir import relocate
from portal.capture.remade import remade
from portal.capture.restoring import after_restore
from portal.core.specs import SerializerSpec

__all__ = [
    "rebuild_tbx_event_file_writer",
    "reduce_event_file_writer",
    "reduce_tbx_event_file_writer",
    "serializer_specs",
]

_TENSORBOARD_WRITER = "tensorboard.summary.writer.event_file_writer.EventFileWriter"
_TENSORBOARDX_WRITER = "tensorboardX.event_file_writer.EventFileWriter"


def reduce_event_file_writer(writer: Any) -> Any:
    """Flush, then travel as (type, log dir, event file, queue size, flush interval)."""
    async_writer = writer._async_writer
    if async_writer._closed:
        raise TypeError(
            f"cannot carry a closed TensorBoard event writer ({writer._file_name}): "
            "drop the reference to it (or make a new SummaryWriter) before the pause"
        )
    writer.flush()  # every event added so far is in the file, which travels with the directory
    return (
        rebuild_event_file_writer,
        (
            type(writer),
            writer._logdir,
            writer._file_name,
            async_writer._byte_queue.maxsize,
            async_writer._worker._flush_secs,
        ),
    )


def rebuild_event_file_writer(
    cls: type, logdir: str, file_name: str, max_queue: int, flush_secs: float
) -> Any:
    """The writer again, appending to its event file once the working directory is back."""
    writer: Any = object.__new__(cls)

    def reopen() -> None:
        module = sys.modules[cls.__module__]  # tensorboard's, loaded with the class

        # A relative path stays as the program gave it (the working directory is back): a
        # SummaryWriter keys its sub-writers (add_scalars) by the log dir's text.
        path, directory = (p if not os.path.isabs(p) else relocate(p) for p in (file_name, logdir))
        if not os.path.exists(path):  # the file stayed on the old machine: a new one here
            fresh = cls(directory, max_queue, flush_secs)
            writer.__dict__.update(fresh.__dict__)
            return
        writer._logdir = directory
        writer._file_name = path
        writer._general_file_writer = open(path, "ab")  # noqa: SIM115 (the writer's to close)
        writer._async_writer = module._AsyncWriter(
            module.RecordWriter(writer._general_file_writer), max_queue, flush_secs
        )

    after_restore(reopen)
    return writer


def reduce_tbx_event_file_writer(writer: Any) -> Any:
    """tensorboardX's writer: drained and flushed, then travels as what makes it again."""
    if writer._closed:
        raise TypeError(
            f"cannot carry a closed tensorboardX event writer ({writer._logdir}): drop the "
            "reference to it (or make a new SummaryWriter) before the pause"
        )
    worker = writer._worker
    worker.stop()  # every event queued before the stop is written
    writer._ev_writer.flush()
    writer._worker = type(worker)(writer._event_queue, writer._ev_writer, writer._flush_secs)
    writer._worker.start()
    return remade(
        writer,
        rebuild_tbx_event_file_writer,
        type(writer),
        writer._logdir,
        writer._ev_writer,
        writer._event_queue._maxsize,
        writer._flush_secs,
    )


def rebuild_tbx_event_file_writer(
    cls: type, logdir: str, events_writer: Any, max_queue: int, flush_secs: float
) -> Any:
    """A tensorboardX writer around the carried ``EventsWriter``: a new queue, a new thread."""
    module = sys.modules[cls.__module__]
    writer: Any = object.__new__(cls)
    writer._logdir = logdir if not os.path.isabs(logdir) else relocate(logdir)
    writer._event_queue = module.multiprocessing.Queue(max_queue)
    writer._ev_writer = events_writer
    writer._flush_secs = flush_secs
    writer._closed = False
    writer._worker = module._EventLoggerThread(writer._event_queue, events_writer, flush_secs)
    writer._worker.start()
    return writer


def serializer_specs() -> list[SerializerSpec]:
    return [
        SerializerSpec(
            name="capture_writers",
            reducers={
                _TENSORBOARD_WRITER: reduce_event_file_writer,
                _TENSORBOARDX_WRITER: reduce_tbx_event_file_writer,
            },
            description="TensorBoard event writers (torch's and tensorboardX's SummaryWriter): "
            "flushed, re-made appending to the same event file",
        )
    ]
