"""Objects that own a thread, carried: a TensorBoard ``SummaryWriter`` in a global (its event
writer's thread and queue) no longer keeps a job from pausing. Paused mid-run and resumed in a
new process, the script's output is an uninterrupted run's, and its log directory holds the same
event files (one per writer: each resumed writer appends to its own) with every scalar an
uninterrupted run writes.
torch and tensorboard: Python 3.11 (the local CPU torch's), skipped elsewhere."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest
from _harness import CORPUS, paused_against_plain, tensorboard_scalars, wandb_history

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("torch", "tensorboard")),
    reason="needs torch (the local CPU build) and tensorboard (noxfile.py's FRAMEWORK_PINS)",
)


@pytest.mark.parametrize("steps", [7, 31])
def test_a_summary_writer_in_a_global_pauses_and_appends_to_its_file(
    tmp_path: Path, steps: int
) -> None:
    run = paused_against_plain(
        tmp_path,
        CORPUS / "writers" / "tb_global.py",
        ready=lambda out: out.count(b"step ") >= steps,
    )
    assert run.out == run.plain.stdout
    # One file per writer (add_scalars makes one per tag), as the uninterrupted run leaves.
    assert tensorboard_scalars(run.job / "runs") == tensorboard_scalars(run.plain_dir / "runs")


@pytest.mark.skipif(
    importlib.util.find_spec("tensorboardX") is None,
    reason="needs tensorboardX (noxfile.py's FRAMEWORK_PINS)",
)
@pytest.mark.parametrize("steps", [5, 23])
def test_a_tensorboardx_writer_in_a_global_pauses_and_appends_to_its_file(
    tmp_path: Path, steps: int
) -> None:
    """tensorboardX's SummaryWriter (a multiprocessing queue and a writer thread): paused
    mid-run, every event queued before the pause is in the file, and the resumed writer appends
    to the same files; scalars and histograms equal an uninterrupted run's."""
    run = paused_against_plain(
        tmp_path,
        CORPUS / "writers" / "tbx_global.py",
        ready=lambda out: out.count(b"step ") >= steps,
    )
    assert run.out == run.plain.stdout
    assert tensorboard_scalars(run.job / "runs") == tensorboard_scalars(run.plain_dir / "runs")
    assert _histograms(run.job / "runs") == _histograms(run.plain_dir / "runs")


def _histograms(folder: Path) -> list[tuple[int, list[float]]]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    found = []
    for path in sorted(folder.rglob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.HasField("histo"):
                    found.append((event.step, list(value.histo.bucket)))
    return found


@pytest.mark.skipif(
    importlib.util.find_spec("wandb") is None, reason="needs wandb (noxfile.py's FRAMEWORK_PINS)"
)
@pytest.mark.parametrize("steps", [4, 17])
def test_a_wandb_run_in_offline_mode_pauses_and_continues_its_history(
    tmp_path: Path, steps: int
) -> None:
    """A wandb run (offline) in a global: paused mid-run, it is finished for the pause (its
    service writes what it buffered) and made again at the resume with the same id, its next
    step where the history stopped. The resumed job died at its next ``log()`` before (the run
    and WANDB_SERVICE pointed at the first process's service), and the first process's history
    was lost; now the runs' files hold one history, the uninterrupted run's."""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_ERROR_REPORTING": "false"}
    env.pop("WANDB_SERVICE", None)
    run = paused_against_plain(
        tmp_path,
        CORPUS / "writers" / "wandb_offline.py",
        ready=lambda out: out.count(b"step ") >= steps,
        env=env,
    )
    assert run.out == run.plain.stdout, run.err.decode()[-2000:]
    ids, history = wandb_history(run.job)
    assert len(ids) == 1 and len(list(run.job.glob("wandb/offline-run-*"))) == 2
    assert history == wandb_history(run.plain_dir)[1]


@pytest.mark.skipif(
    importlib.util.find_spec("wandb") is None, reason="needs wandb (noxfile.py's FRAMEWORK_PINS)"
)
def test_a_wandb_run_finished_for_a_pause_not_taken_is_live_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run is finished before a pause reads the state; when the pause is not taken after
    all (a value that defers it), the run is made again in place and the program's next
    ``log()`` continues its history."""
    import wandb

    from portal.capture import remade
    from portal.capture.extensions import trackers

    for name, value in (("WANDB_MODE", "offline"), ("WANDB_ERROR_REPORTING", "false")):
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    trackers.serializer_specs()  # as the runtime's plugins do
    run = wandb.init(project="portal-test", mode="offline", dir=str(tmp_path))
    run.log({"loss": 1.0})
    remade.finish_before_pause()
    assert run._is_finished
    problems: list[str] = []
    remade.undo_before_pause(problems.append)
    assert not problems and not run._is_finished
    run.log({"loss": 2.0})
    run.finish()
    ids, history = wandb_history(tmp_path)
    assert len(ids) == 1 and history == [(0, 1.0), (1, 2.0)]


_MLFLOW_ENV = {
    "MLFLOW_ALLOW_FILE_STORE": "true",  # mlflow 3 keeps the local file store, but asks for this
    "MLFLOW_DISABLE_TELEMETRY": "true",  # no packet leaves the machine
    "DO_NOT_TRACK": "true",
}


def _mlflow_runs(folder: Path) -> list[tuple[str, str, dict[str, str], dict[str, list[Any]]]]:
    """Each run of the store in ``folder/mlruns``: its name, status, parameters and every
    metric's history as (step, value), ordered by name."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"file:{folder / 'mlruns'}")
    found = []
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id]):
            history = {
                key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
                for key in run.data.metrics
            }
            found.append((run.info.run_name, run.info.status, run.data.params, history))
    return sorted(found, key=lambda r: r[0])


@pytest.mark.skipif(
    importlib.util.find_spec("mlflow") is None, reason="needs mlflow (noxfile.py's FRAMEWORK_PINS)"
)
@pytest.mark.parametrize(("steps", "shape"), [(5, "one"), (19, "one"), (11, "nested")])
def test_an_mlflow_run_pauses_and_continues_as_the_same_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: int, shape: str
) -> None:
    """An MLflow run on a local store (nested: a trial's run inside a sweep's, logged
    asynchronously): paused mid-run and resumed, the next ``log_metric`` continues the same run.
    Before, no run was active in the resumed process, so mlflow started a new one: the history
    was split in two runs and the first stayed RUNNING for ever. Now the store holds the runs an
    uninterrupted run leaves, finished, each with its whole history."""
    env = {**os.environ, **_MLFLOW_ENV}
    run = paused_against_plain(
        tmp_path,
        CORPUS / "writers" / "mlflow_local.py",
        "30",
        shape,
        ready=lambda out: out.count(b"step ") >= steps,
        env=env,
    )
    assert run.out == run.plain.stdout, run.err.decode()[-2000:]
    for name, value in _MLFLOW_ENV.items():
        monkeypatch.setenv(name, value)
    runs = _mlflow_runs(run.job)
    assert runs == _mlflow_runs(run.plain_dir)
    assert [(name, status) for name, status, _, _ in runs] == (
        [("sweep", "FINISHED"), ("trial-0", "FINISHED")]
        if shape == "nested"
        else [("train", "FINISHED")]
    )
    assert [step for step, _ in runs[-1][3]["loss"]] == list(range(30))


@pytest.mark.skipif(
    importlib.util.find_spec("mlflow") is None, reason="needs mlflow (noxfile.py's FRAMEWORK_PINS)"
)
def test_an_mlflow_run_that_cannot_be_made_active_again_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run was deleted while the job was paused: the restore says so (a restore note, on
    stderr and in the job's events) and the program goes on; its next log starts a new run."""
    import mlflow

    from portal.capture.extensions import trackers

    for name, value in _MLFLOW_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(f"file:{tmp_path / 'mlruns'}")
    try:
        mlflow.start_run(run_name="gone")
        state = trackers.capture_mlflow()
        assert state is not None and len(state["runs"]) == 1
        mlflow.end_run()
        mlflow.delete_run(state["runs"][0])
        trackers.restore_mlflow(state)
        assert mlflow.active_run() is None
        assert f"the MLflow run {state['runs'][0]} could not be made active again" in (
            capsys.readouterr().err
        )
    finally:
        while mlflow.active_run() is not None:
            mlflow.end_run()
        mlflow.set_tracking_uri(None)


def test_a_local_store_uri_follows_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tracking URI inside the working directory the checkpoint was taken in points into the
    directory the job resumed in; a server's URI, or a path elsewhere, is kept as it is."""
    from portal.capture.extensions import trackers, workdir

    old, new = tmp_path / "old", tmp_path / "new"
    monkeypatch.setattr(workdir, "_MOVED", [(str(old), str(new))])
    assert trackers._relocated(f"file:{old}/mlruns") == f"file:{new}/mlruns"
    assert trackers._relocated(f"file://{old}/mlruns") == f"file://{new}/mlruns"
    assert trackers._relocated(f"sqlite:///{old}/m.db") == f"sqlite:///{new}/m.db"
    assert trackers._relocated(f"{old}/mlruns") == f"{new}/mlruns"
    assert trackers._relocated("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert trackers._relocated("file:/elsewhere/mlruns") == "file:/elsewhere/mlruns"
    assert trackers._relocated("mlruns") == "mlruns"
