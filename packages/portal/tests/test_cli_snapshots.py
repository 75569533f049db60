"""What people read, held as snapshots: ``portal status``, ``jobs``, ``explain`` and
``checkpoints`` for a job suspended by a notice and resumed, with what changes from run to run
(ids, clock times, sizes, ages, durations, paths, line numbers) replaced by names. A change to
these words or columns shows here as a diff to review, not as a silent drift."""

from __future__ import annotations

import re

from conftest import PortalCli

#: (pattern, name): what differs between two runs of the same job, in the order applied.
_VARYING = [
    (r"\b\d{8}T\d{6}\.\d{3}Z-[0-9a-f]{8}\b", "<CKPT>"),
    (r"\bj-[0-9a-f]{10}\b", "<JOB>"),
    (r"\blocal-[0-9a-f]+\b", "<NOTICE>"),
    (r"\b\d\d:\d\d:\d\d UTC\b", "<TIME>"),
    (r"\b\d+(?:\.\d)? (?:B|kB|MB|GB)\b", "<SIZE>"),
    (r"\b\d+[smhd] ago\b", "<AGE> ago"),
    (r"(?<=  )(?:\d+[dhm])?\d+[dhms](?=  )", "<DURATION>"),
    (r"\b\d+\.\d s\b", "<S> s"),
    (r"count\.py:\d+", "count.py:<LINE>"),
]


def _normal(text: str, workdir: str = "") -> str:
    if workdir:
        text = text.replace(workdir, "<WORKDIR>")
    for pattern, name in _VARYING:
        text = re.sub(pattern, name, text)
    # Columns are as wide as their widest value: after the names above, one gap is as good.
    return "\n".join(re.sub(r" {2,}", "  ", line).rstrip() for line in text.splitlines())


def test_what_people_read_of_a_job_suspended_and_resumed(portal: PortalCli) -> None:
    job = portal("run", "--detach", "--name", "snap", "count.py", "3").stdout.strip()
    portal.wait_for_output(job, "step 2 ")
    portal("notice", job)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    assert portal("resume", job).returncode == 0

    assert _normal(portal("status", "snap").stdout, str(portal.workdir)) == (
        "job  <JOB> (snap)\n"
        "state  done\n"
        "script  count.py 3\n"
        "workdir  <WORKDIR>\n"
        "attempts  2\n"
        "  #1 local: suspended, exit 75\n"
        "  #2 local: exited, exit 0\n"
        "checkpoint <CKPT> (<SIZE>, <TIME>)\n"
        "carry  ok: a checkpoint can carry the whole state"
    )

    lines = _normal(portal("jobs").stdout).splitlines()
    assert lines[0] == (
        "JOB  NAME  SUBMITTED  DURATION  STATE  MACHINE  ATTEMPTS  LAST CHECKPOINT  CARRY  SCRIPT"
    )
    assert lines[1:] == [
        "<JOB>  snap  <AGE> ago  <DURATION>  done  local  2 (1 resumed)  <SIZE>, <AGE> ago  ok"
        "  count.py"
    ]

    text = _normal(portal("explain", "snap").stdout)
    notice_part = text.split("\ncheckpoint check:")[0]
    assert notice_part == (
        "job <JOB>: 1 notice(s)\n"
        "notice 1 at <TIME>: notice from local (local, preemption): the machine goes at <TIME>, "
        "in 120 s\n"
        "  figures: provider local, source local, notice 120 s, deadline <TIME>\n"
        "  <TIME> pausing: pausing at the next safe point, by <TIME>; the rest of the notice "
        "(until <TIME>) is kept for saving and uploading\n"
        "  <TIME> paused: paused at count.py:<LINE> in <module>: checkpoint of <SIZE> written\n"
        "  <TIME> uploaded: checkpoint uploaded: <SIZE> in <S> s, streamed while it was written, "
        "encrypted with the job's key\n"
        "  <TIME> suspended: suspended: checkpoint <CKPT> (<SIZE>) is complete; resume with "
        "`portal resume snap`\n"
        "  <TIME> resuming: resuming from checkpoint <CKPT> on this machine (local, on-demand)"
    )
    checks = text.split("\ncheckpoint check:")[1].splitlines()[1:]
    assert checks and all(
        line.startswith("  info (checkpoint) at <TIME>, carry-ok: The checkpoint check passed")
        for line in checks
    ), checks

    assert _normal(portal("checkpoints", "snap").stdout) == (
        "CHECKPOINT  STORED  SIZE  STATE  WHY\n<CKPT>  <TIME>  <SIZE>  complete"
    )
