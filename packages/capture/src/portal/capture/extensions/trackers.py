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

The rebuild function's name is part of the checkpoint format: do not rename it.
"""

from __future__ import annotations

import sys
from typing import Any

from portal.capture import remade
from portal.core.specs import SerializerSpec

__all__ = ["rebuild_wandb_run", "reduce_wandb_run", "serializer_specs"]


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
