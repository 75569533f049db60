"""docs/embedding.md's scheduler loop runs as it is written there, and prints what the page says
it prints: two real jobs started through ``portal.jobs``, one noticed, suspended and resumed in
another directory, both done."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import SCRIPTS

PAGE = Path(__file__).resolve().parents[3] / "docs" / "embedding.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def _per_job(lines: list[str]) -> dict[str, list[str]]:
    """Each job's own lines in order (the two jobs' lines interleave as they happen to)."""
    jobs: dict[str, list[str]] = {}
    for line in lines:
        found = re.match(r"\[(\w+)\] |(\w+): ", line)
        assert found, line
        jobs.setdefault(found.group(1) or found.group(2), []).append(line)
    return jobs


def test_the_scheduler_loop_of_the_embedding_page_runs_as_written(tmp_path: Path) -> None:
    loop = next(b for b in _blocks("python") if "while True:" in b)
    said = _blocks("text")[-1].splitlines()
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(SCRIPTS / "count.py", work / "count.py")
    (work / "scheduler.py").write_text(loop, encoding="utf-8")
    env = {**os.environ, "PORTAL_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "scheduler.py"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    printed = done.stdout.splitlines()
    assert _per_job(printed) == _per_job(said), done.stdout
    assert printed[-2:] == said[-2:]
    # The resumed job ran its second attempt in the other directory and ended as one run.
    plain = subprocess.run(
        [sys.executable, "count.py", "1"], cwd=work, capture_output=True, check=True
    ).stdout
    homes = sorted((tmp_path / "home" / "jobs").glob("*"))
    outputs = {
        b"".join(p.read_bytes() for p in sorted(job.glob("attempts/*/stdout"))) for job in homes
    }
    assert plain in outputs
    assert (work / "elsewhere" / "count.py").is_file()  # its files came with the checkpoint
