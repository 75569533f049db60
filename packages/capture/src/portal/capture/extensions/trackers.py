"""Experiment trackers' runs, re-made at the resume (:mod:`portal.capture.remade`).

**wandb.** A ``wandb.Run`` talks to a service process (``wandb-core``) that ``wandb.init``
started, over a socket whose address it also writes into ``os.environ["WANDB_SERVICE"]``.
Pickled by value, the run and that variable came back pointing at the first process's service,
and the resumed job died at its next ``run.log()`` (``WandbServiceConnectionError``). Now the
variable is not carried (:data:`.environment.PROCESS_BOUND_VARIABLES`), and a run not finished
travels as the ``wandb.init`` that makes it again: same id with ``resume="allow"``, project,
entity, mode, directory, name, group, job type, tags, notes and config. Online, wandb's server
continues the run's history at its last step; offline, the new run continues it from the step the
run had reached (``resume_from="<id>?_step=<last>"``: the next ``log()`` is the next step), in
one more offline run directory with the same id, which ``wandb sync`` uploads as the same run.
Before a pause reads the program's state (not before a check or a periodic checkpoint, after
which the program runs on), the current run is marked preempting and finished, as wandb's own
``atexit`` hook would have done at the exit the paused process makes without it: offline, the
service writes its history into the run's file only every 15 s or at the finish, and that file
travels with the working directory; without this the first process's history was lost. Should
the pause not be taken after all, the run is made again in place and the program runs on. A run
the program finished itself travels as the value it is.

**MLflow.** The fluent API's runs live in mlflow's module, not in the program's values: the stack
of active runs (a thread-local of the main thread), the experiment :func:`mlflow.set_experiment`
chose, the last run ended, and the tracking and registry URIs. The ``ActiveRun`` a program keeps
pickles as the record it is, but in the resumed process no run was active, so the next
``log_metric`` started a *new* run: the history was split in two, and the first run was left
``RUNNING`` for ever. Now they travel as process state (:func:`capture_mlflow`), restored after
the working directory and the environment: the URIs again (a local store's path inside the
working directory follows it when the job resumes elsewhere), the experiment, and each active
run made active again by ``mlflow.start_run(run_id=…)``, nested as it was, so the next
``log_metric`` continues the same run. Metrics logged asynchronously are flushed before anything
is read (:func:`flush_mlflow`, first of the extensions), so the working directory holds them. A
run that cannot be made active again (its server down, the run deleted) is said as a restore
note, and the program continues without it.

The rebuild function's name is part of the checkpoint format: do not rename it.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from portal.capture import remade
from portal.capture.extensions import workdir
from portal.capture.notes import note_on_restore
from portal.core.specs import CaptureExtensionSpec, SerializerSpec

__all__ = [
    "capture_mlflow",
    "flush_mlflow",
    "rebuild_wandb_run",
    "reduce_wandb_run",
    "restore_mlflow",
    "serializer_specs",
    "specs",
]


def _init_arguments(run: Any) -> dict[str, Any]:
    settings = run._settings
    return {
        "id": settings.run_id,
        "project": settings.project,
        "entity": settings.entity,
        "mode": settings.mode,
        "dir": settings.root_dir,
        "name": settings.run_name,
        "group": settings.run_group,
        "job_type": settings.run_job_type,
        "tags": list(settings.run_tags or ()),
        "notes": settings.run_notes,
        "config": dict(run.config.as_dict()),
    }


def reduce_wandb_run(run: Any) -> Any:
    """A live run as the ``wandb.init`` that makes it again, at the step it reached (a run
    finished for the pause is made again too: it was live for the program)."""
    finished = _FINISHED_FOR_PAUSE.get(id(run))
    if finished is not None and finished[0] is run:
        return remade.remade(run, rebuild_wandb_run, finished[1], finished[2])
    if getattr(run, "_is_finished", True):
        return NotImplemented
    return remade.remade(run, rebuild_wandb_run, _init_arguments(run), run._local_step)


#: Runs finished before the pause's snapshot, by ``id``: (run, init arguments, next step).
_FINISHED_FOR_PAUSE: dict[int, tuple[Any, dict[str, Any], int]] = {}


def _finish_current_run() -> list[Any]:
    """Before a pause: the current run is marked preempting and finished, as wandb's own
    ``atexit`` hook would (the paused process exits without it), so that the service writes its
    history into the run's file before the working directory is read. Undone (the run made
    again in place) if the pause is not taken."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None)
    if run is None or getattr(run, "_is_finished", True):
        return []
    init, step = _init_arguments(run), run._local_step
    run.mark_preempting()
    run.finish()
    _FINISHED_FOR_PAUSE[id(run)] = (run, init, step)

    def live_again() -> None:
        _FINISHED_FOR_PAUSE.pop(id(run), None)
        remade.become(run, rebuild_wandb_run(init, step))

    return [live_again]


def rebuild_wandb_run(init: dict[str, Any], next_step: int) -> Any:
    """The run again: offline, continued at ``next_step`` (``resume_from`` its last step: no
    server to say where its history stood); online, resumed by id (the server says)."""
    wandb = sys.modules.get("wandb") or __import__("wandb")
    given = {k: v for k, v in init.items() if v is not None}
    if given.get("mode") == "offline" and next_step > 0:
        given["resume_from"] = f"{given.pop('id')}?_step={next_step - 1}"
    else:
        given["resume"] = "allow"
    return wandb.init(**given)


def serializer_specs() -> list[SerializerSpec]:
    remade.before_pause(_finish_current_run)
    return [
        SerializerSpec(
            name="capture_trackers",
            reducers={"wandb.sdk.wandb_run.Run": reduce_wandb_run},
            description="a wandb run not finished, made again by wandb.init with its id "
            "(resume='allow') at the step it reached",
        )
    ]


def flush_mlflow() -> None:
    """Metrics, params and tags logged with ``synchronous=False`` (or
    ``MLFLOW_ENABLE_ASYNC_LOGGING``) written out before the working directory is read."""
    mlflow = sys.modules.get("mlflow")
    flush = getattr(mlflow, "flush_async_logging", None)
    if flush is not None:
        flush()


def capture_mlflow() -> dict[str, Any] | None:
    """The fluent API's state: URIs set by the program, the active experiment, the active runs
    (outermost first) and the last run ended; None where mlflow's fluent module is not loaded."""
    fluent = sys.modules.get("mlflow.tracking.fluent")
    if fluent is None:
        return None
    tracking = sys.modules.get("mlflow.tracking._tracking_service.utils")
    registry = sys.modules.get("mlflow.tracking._model_registry.utils")
    return {
        "tracking_uri": getattr(tracking, "_tracking_uri", None),
        "registry_uri": getattr(registry, "_registry_uri", None),
        "experiment_id": fluent._active_experiment_id,
        "runs": [run.info.run_id for run in fluent._active_run_stack.get()],
        "last_run_id": fluent._last_active_run_id.get(),
    }


def _relocated(uri: str) -> str:
    """A local store's URI (a path, ``file:``, ``sqlite:///``) pointing into the working
    directory the checkpoint was taken in, mapped into this process's; any other as it is."""
    prefix = next((p for p in ("sqlite:///", "file://", "file:") if uri.startswith(p)), "")
    path = uri[len(prefix) :]
    return prefix + workdir.relocate(path) if os.path.isabs(path) else uri


def restore_mlflow(state: dict[str, Any] | None) -> None:
    if not state:
        return
    mlflow = importlib.import_module("mlflow")
    fluent = importlib.import_module("mlflow.tracking.fluent")

    if state["tracking_uri"] is not None:
        mlflow.set_tracking_uri(_relocated(state["tracking_uri"]))
    if state["registry_uri"] is not None:
        mlflow.set_registry_uri(_relocated(state["registry_uri"]))
    fluent._active_experiment_id = state["experiment_id"]  # type: ignore[attr-defined]
    for depth, run_id in enumerate(state["runs"]):
        try:
            mlflow.start_run(run_id=run_id, nested=depth > 0)
        except Exception as exc:  # the program runs on; what did not come back is said
            note_on_restore(
                f"the MLflow run {run_id} could not be made active again "
                f"({type(exc).__name__}: {exc}); the program's next log starts a new run. "
                "Check that its tracking server is reachable and the run not deleted"
            )
            break
    if state["last_run_id"] is not None:
        fluent._last_active_run_id.set(state["last_run_id"])


def specs() -> tuple[list[CaptureExtensionSpec], list[CaptureExtensionSpec]]:
    """(the flush, run before every other extension reads anything; the fluent state, restored
    after the working directory and the environment)."""
    flush = CaptureExtensionSpec(
        name="mlflow_pending",
        capture=flush_mlflow,
        restore=lambda _: None,
        modules=("mlflow",),
        description="MLflow's asynchronously logged values, written before the files are read",
    )
    fluent = CaptureExtensionSpec(
        name="mlflow_runs",
        capture=capture_mlflow,
        restore=restore_mlflow,
        modules=("mlflow",),
        description="MLflow's active runs, experiment and URIs, made active again at the resume",
    )
    return [flush], [fluent]
