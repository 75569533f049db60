from __future__ import annotations

import pytest
from policies_factories import job

from portal.core.errors import InvalidArgumentError
from portal.core.specs import StateMeasure
from portal.policies import Figure, StateSample, choose, measure_job
from portal.policies.measure import margin


def test_checkpoint_figures_add_a_tenth_for_growth() -> None:
    for figure in (Figure.CHECKPOINT_AS_STORED, Figure.REHEARSAL, Figure.LAST_MOVE_CAPSULE):
        assert StateSample(figure=figure, bytes=10_000).measure() == StateMeasure(
            bytes=11_000, figure=str(figure)
        )


def test_memory_and_requests_are_taken_as_they_are() -> None:
    assert StateSample(figure=Figure.RESIDENT_AND_GPU, bytes=10_000).measure().bytes == 10_000
    assert StateSample(figure=Figure.ASKED_FOR, bytes=10_000).measure().bytes == 10_000


def test_a_checkpoint_beats_memory_and_the_latest_checkpoint_wins() -> None:
    samples = [
        StateSample(figure=Figure.RESIDENT_AND_GPU, bytes=50, at=300),
        StateSample(figure=Figure.CHECKPOINT_AS_STORED, bytes=10, at=100),
        StateSample(figure=Figure.REHEARSAL, bytes=20, at=200),
        StateSample(figure=Figure.ASKED_FOR, bytes=99, at=400),
    ]
    assert choose(samples) == StateMeasure(bytes=22, figure="the check's rehearsal")
    assert choose(samples[:1] + samples[3:]) == StateMeasure(
        bytes=50, figure="its resident and GPU memory now"
    )
    assert choose(samples[3:]) == StateMeasure(bytes=99, figure="what it asked for")
    assert choose([]) is None


def test_the_checks_walk_is_a_checkpoint_figure_named_as_such() -> None:
    """capture_probe = on writes nothing: the walk's bytes are named the check's walk, never a
    rehearsal that did not run; they count as a checkpoint's bytes (a tenth added)."""
    walk = StateSample(figure=Figure.CHECK_WALK, bytes=20, at=200)
    rss = StateSample(figure=Figure.RESIDENT_AND_GPU, bytes=500, at=300)
    assert choose([walk, rss]) == StateMeasure(bytes=22, figure="the check's walk")
    rehearsal = StateSample(figure=Figure.REHEARSAL, bytes=30, at=200)
    assert choose([walk, rehearsal]).figure == "the check's rehearsal"  # type: ignore[union-attr]


def test_measure_job_falls_back_to_its_state_guess() -> None:
    assert measure_job(job(state_gib=2), None) == StateMeasure(
        bytes=2 * 2**30, figure="what it asked for"
    )
    assert measure_job(job(), None) is None
    # --memory is the machine's memory, never a size of the state
    assert measure_job(job(memory_gib=64), None) is None
    given = StateMeasure(bytes=5, figure="its checkpoint as stored")
    assert measure_job(job(state_gib=2), given) is given


def test_resident_memory_needs_a_quarter_over() -> None:
    assert margin(StateMeasure(bytes=1, figure="its resident and GPU memory now")) == 1.25
    assert margin(StateMeasure(bytes=1, figure="its checkpoint as stored")) == 1.0


def test_negative_sizes_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="never negative"):
        StateSample(figure=Figure.REHEARSAL, bytes=-1)
    with pytest.raises(InvalidArgumentError, match="job job-1 guesses its state at -1"):
        measure_job(job(state_gib=-1), None)


def test_an_unnamed_figure_is_refused_with_the_names() -> None:
    with pytest.raises(InvalidArgumentError, match="'about 3 GB' is not one Portal names"):
        measure_job(job(), StateMeasure(bytes=3, figure="about 3 GB"))
    with pytest.raises(ValueError):
        StateSample(figure="a guess", bytes=1)  # type: ignore[arg-type]
