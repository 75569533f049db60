"""Starting a node: a node that cannot start ends its attempt, so nothing is left `running`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from portal.control.plane import ControlPlane
from portal.core.domain import AttemptState
from portal.core.settings import Settings
from portal.node.launch import NodeStartError, job_workdir, launch_node, resume_workdir


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    control = ControlPlane(Settings.load({"home": str(tmp_path / "home")}, environ={}))
    yield control
    control.store.close()


def test_a_node_that_cannot_start_ends_its_attempt_and_says_where(
    plane: ControlPlane, tmp_path: Path
) -> None:
    workdir = tmp_path / "w"
    workdir.mkdir()
    job = plane.create_job(script="s.py", workdir=workdir)
    workdir.rmdir()  # gone between the check and the start
    with pytest.raises(NodeStartError, match=rf"attempt 1 could not start in {workdir}: "):
        launch_node(plane, job, resume_from=None)
    (attempt,) = plane.store.attempts(job.id)
    assert attempt.state is AttemptState.FAILED and attempt.exit_code is None


def test_the_folder_a_resume_names_becomes_the_jobs_own(
    plane: ControlPlane, tmp_path: Path
) -> None:
    workdir = tmp_path / "w"
    workdir.mkdir()
    job = plane.create_job(script="s.py", workdir=workdir)
    assert resume_workdir(plane, job, None, "j") == workdir  # there: nothing recorded
    assert job_workdir(plane, job) == workdir
    moved = resume_workdir(plane, job, str(tmp_path / "a" / "b"), "j")
    assert moved == tmp_path / "a" / "b" and moved.is_dir()
    assert job_workdir(plane, job) == moved
    assert resume_workdir(plane, job, str(moved), "j") == moved  # the same again: no new event
    assert [e.kind for _, e in plane.store.events(job.id)].count("workdir") == 1


def test_a_folder_that_cannot_be_made_is_refused_by_name(
    plane: ControlPlane, tmp_path: Path
) -> None:
    job = plane.create_job(script="s.py", workdir=tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=rf"--workdir {blocker}/x: cannot make the directory"):
        resume_workdir(plane, job, str(blocker / "x"), "j")
    assert job_workdir(plane, job) == tmp_path
