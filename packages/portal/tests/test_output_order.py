"""The replay order of an attempt's stdout and stderr, from the node's index of their sizes."""

from __future__ import annotations

import time
from pathlib import Path

from portal.control.output_order import ordered_pieces
from portal.node.output_index import SAMPLE_S, OutputIndex


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


def _replay(index: Path, out: Path, err: Path) -> list[str]:
    files = {"stdout": out.read_bytes(), "stderr": err.read_bytes()}
    pieces = ordered_pieces(
        index, stdout_size=len(files["stdout"]), stderr_size=len(files["stderr"])
    )
    return [files[stream][start:end].decode() for stream, start, end in pieces]


def test_both_grown_in_one_sample_are_ordered_by_their_last_writes(tmp_path: Path) -> None:
    """Both files grew between two samples (the node was slow to look): stderr written first
    is replayed first, as the modification times say; stdout first stays first."""
    index, out, err = tmp_path / "output.idx", tmp_path / "out", tmp_path / "err"
    with out.open("ab") as stdout, err.open("ab") as stderr:
        sampler = OutputIndex(index, stdout, stderr, now=time.time)
        sampler.sample()
        for first, second in ((stderr, stdout), (stdout, stderr), (stderr, stdout)):
            for f in (first, second):
                f.write(b"err\n" if f is stderr else b"out\n")
                f.flush()
                time.sleep(0.05)  # more than the file system's clock step
            sampler.sample()
        sampler.close()
    assert _replay(index, out, err) == ["err\n", "out\n", "out\n", "err\n", "err\n", "out\n"]


def test_the_index_samples_on_its_own_while_the_job_writes(tmp_path: Path) -> None:
    """Started, the index notes the growth by itself (the node's loop may be busy), every
    SAMPLE_S: lines written 0.1 s apart replay in the order written."""
    index, out, err = tmp_path / "output.idx", tmp_path / "out", tmp_path / "err"
    with out.open("ab") as stdout, err.open("ab") as stderr:
        sampler = OutputIndex(index, stdout, stderr, now=time.time).start()
        written = []
        for i in range(6):
            f = stdout if i % 2 == 0 else stderr
            f.write(f"line {i}\n".encode())
            f.flush()
            written.append(f"line {i}\n")
            time.sleep(0.1)
        sampler.close()
    assert _replay(index, out, err) == written
    assert SAMPLE_S <= 0.05
