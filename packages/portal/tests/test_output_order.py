"""The replay order of an attempt's stdout and stderr, from the node's index of their sizes."""

from __future__ import annotations

from pathlib import Path

from portal.control.output_order import ordered_pieces


def test_pieces_follow_the_notes_and_nothing_is_left_out(tmp_path: Path) -> None:
    index = tmp_path / "output.idx"
    index.write_text("1.0 0 0\n1.1 6 0\n1.2 6 4\n1.3 10 9\n1.4 10 9\n1.5 12")  # a torn last line
    assert ordered_pieces(index, stdout_size=15, stderr_size=11) == [
        ("stdout", 0, 6),
        ("stderr", 0, 4),
        ("stdout", 6, 10),  # one note, both streams: stdout first
        ("stderr", 4, 9),
        ("stdout", 10, 15),  # after the last whole note: the rest, stdout then stderr
        ("stderr", 9, 11),
    ]


def test_a_cut_attempt_stops_at_its_kept_output(tmp_path: Path) -> None:
    index = tmp_path / "output.idx"
    index.write_text("1.0 5 0\n1.1 5 3\n1.2 20 3\n")
    assert ordered_pieces(index, stdout_size=8, stderr_size=3) == [
        ("stdout", 0, 5),
        ("stderr", 0, 3),
        ("stdout", 5, 8),
    ]
    assert ordered_pieces(index, stdout_size=8, stderr_size=3, streams=("stderr",)) == [
        ("stderr", 0, 3)
    ]


def test_without_an_index_stdout_then_stderr(tmp_path: Path) -> None:
    """An attempt of a Portal before the index: the whole of each, as before."""
    assert ordered_pieces(tmp_path / "none", stdout_size=7, stderr_size=2) == [
        ("stdout", 0, 7),
        ("stderr", 0, 2),
    ]
    assert ordered_pieces(tmp_path / "none", stdout_size=0, stderr_size=0) == []
