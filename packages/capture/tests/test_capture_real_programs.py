"""Differential tests on real, public programs that nobody here wrote (see _real_programs.py).

Each program runs once uninterrupted (``python SCRIPT``), then under ``portal.runtime run`` in
six chains: five get one notice each and one gets two, at random moments, each notice a SIGTERM
or a pause request on the control socket (at random), every pause resumed with ``portal.runtime
resume`` in a new process. Every chain must print what the plain run printed (stdout and stderr,
after blanking only the program's wall-clock fields: times, durations, rates), end with the same
exit status, leave the same output files and, for torch programs, bit-identical final weights.

Per pause the test records whether it was taken, how long after the notice the safe point came
(the checkpoint header's ``requested_time`` and ``safe_point_time``) and, for a pause not taken,
why (the runtime's ``deferred``/``abandoned`` events with their problems, its notes on stderr).
A table per program is printed (``pytest -s`` shows it) and written as JSON to
``$PORTAL_CORPUS_REPORT`` when that is set.

A test fails on any difference, and on a notice *held*: not taken although the program ran on
for more than 1 s after it while the runtime reported what kept it from pausing (a pause taken
late, but before its deadline, is reported, not failed; a notice that arrives as the program
ends is neither). The runtime's own ``portal: ...`` lines on stderr (a pause abandoned at its
deadline, a restore note) are not the program's output: they are reported, and left out of the
comparison. Programs that fail through a capture gap are listed in KNOWN_GAPS with the gap.

Cost: a program takes 3-15 s, so a program's test takes one to a few minutes. CI runs a seeded
sample, ``$PORTAL_CORPUS_SAMPLE`` programs per Python (default 2), chosen by the seed printed in
the output (``PORTAL_TEST_SEED=N`` reproduces it), never one of KNOWN_GAPS;
``PORTAL_CORPUS_ALL=1`` runs them all, the known gaps included.
``PORTAL_CORPUS_JOBS`` (default 2) chains run at once (torch programs: one at a time);
``PORTAL_CORPUS_DEADLINE_S`` (default 30) is each notice's deadline.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from _harness import EXIT_PAUSED, Control, connect, runtime, short_dir
from _real_programs import PROGRAMS, Program, Unavailable

pytestmark = [pytest.mark.slow, pytest.mark.real_programs]

SEED = int(os.environ.get("PORTAL_TEST_SEED") or random.SystemRandom().randrange(1 << 30))
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
TORCH_PYTHON = (3, 11)  # the local CPU wheel of torch exists for CPython 3.11 only
HAS_TORCH = importlib.util.find_spec("torch") is not None
ONE_NOTICE_CHAINS = 5
#: A notice's deadline: a node's pause request's, and the runtime's SIGTERM grace (default 30 s).
DEADLINE_S = float(os.environ.get("PORTAL_CORPUS_DEADLINE_S", "30"))
WITHIN_S = 1.0
JOBS = max(1, int(os.environ.get("PORTAL_CORPUS_JOBS", "2")))

#: Programs that fail here through a capture gap, named: name -> the gap. Their tests are
#: xfail(strict=False): they run in full (and are reported), and pass again once it is closed.
KNOWN_GAPS: dict[str, str] = {}


def _torch_skip(program: Program) -> str | None:
    if not program.torch:
        return None
    if sys.version_info[:2] != TORCH_PYTHON:
        return f"torch programs run on Python {'.'.join(map(str, TORCH_PYTHON))} only"
    if not HAS_TORCH:
        return "torch is not installed here (only the local CPU wheel may be: see noxfile.py)"
    return None


def _sample() -> set[str] | None:
    if os.environ.get("PORTAL_CORPUS_ALL") == "1":
        return None
    size = int(os.environ.get("PORTAL_CORPUS_SAMPLE", "2"))
    # A known gap is left out of the sample: it runs as an xfail for minutes (mpmath took
    # 7 of CI's 60), and what it would report is already said in KNOWN_GAPS.
    names = [p.name for p in PROGRAMS if _torch_skip(p) is None and p.name not in KNOWN_GAPS]
    return set(random.Random(f"{SEED}:{PYTHON}").sample(names, min(size, len(names))))


SAMPLE = _sample()


def _seed_line() -> str:
    chosen = "all programs" if SAMPLE is None else f"sample {sorted(SAMPLE)}"
    return (
        f"real programs: seed={SEED} (PORTAL_TEST_SEED={SEED} reproduces), Python {PYTHON}, "
        f"{chosen}"
    )


# -- running ----------------------------------------------------------------------------------


@dataclass
class Output:
    rc: int
    stdout: bytes
    stderr: bytes
    seconds: float


@dataclass
class Notice:
    """One notice sent to a chain, and what became of it."""

    chain: int
    segment: int
    how: str  # sigterm | node
    delay: float  # seconds after the runtime was armed
    sent: float  # unix time
    taken: bool = False
    requested_time: float | None = None
    safe_point_time: float | None = None
    paused_at: str = ""
    problems: list[str] = field(default_factory=list)  # the header's: what deferred it
    deferred: list[str] = field(default_factory=list)  # the runtime's deferred events
    reason: str = ""  # why it was not taken
    ended: float | None = None  # unix time its process ended (not taken: paused or finished)
    held: bool = False  # not taken although the script ran on: values or positions held it

    @property
    def status(self) -> str:
        return "taken" if self.taken else "HELD" if self.held else "ended first"

    @property
    def to_safe_point(self) -> float | None:
        if self.safe_point_time is None or self.requested_time is None:
            return None
        return self.safe_point_time - self.requested_time

    @property
    def from_sent(self) -> float | None:
        return None if self.safe_point_time is None else self.safe_point_time - self.sent


@dataclass
class ChainRun:
    index: int
    plan: list[float]
    rcs: list[int] = field(default_factory=list)
    stdout: bytes = b""
    stderr: bytes = b""
    notices: list[Notice] = field(default_factory=list)
    unsent: list[str] = field(default_factory=list)  # notices due after the script had ended
    notes: list[str] = field(default_factory=list)  # the runtime's own lines on stderr
    work: Path | None = None


def _problem_text(p: dict[str, Any]) -> str:
    where = f" at {p['where']}" if p.get("where") else ""
    return f"{p.get('name')} ({p.get('type_name')}: {p.get('reason')}){where}"


def _summary(problems: list[dict[str, Any]], limit: int = 6) -> str:
    """Problems grouped by type and reason, one example each: values that failed to pickle
    first (they hold a pause wherever the program is), then the others, most frequent first."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in problems:
        reason = re.sub(r" at 0x[0-9a-f]+", "", str(p.get("reason", "")))
        groups.setdefault((str(p.get("type_name")), reason), []).append(p)
    ranked = sorted(
        groups.values(), key=lambda g: ("Error" not in str(g[0].get("reason")), -len(g))
    )
    parts = [(f"{len(g)}x " if len(g) > 1 else "") + _problem_text(g[0]) for g in ranked[:limit]]
    if len(ranked) > limit:
        parts.append(f"and {len(ranked) - limit} other kinds")
    return "; ".join(parts) or "no problem reported"


RUNTIME_NOTE = re.compile(rb"^portal: .*\n?", re.MULTILINE)


def _launch(cmd: list[str], cwd: Path, env: dict[str, str], logs: Path, tag: str):
    out, err = logs / f"{tag}.out", logs / f"{tag}.err"
    # Files, not pipes: a program that prints a lot must not stall while the test waits.
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=fo, stderr=fe)
    return proc, out, err


def run_plain(script: str, args: list[str], work: Path, env: dict[str, str], logs: Path) -> Output:
    start = time.monotonic()
    proc, out, err = _launch([sys.executable, script, *args], work, env, logs, "plain")
    try:
        rc = proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return Output(rc, out.read_bytes(), err.read_bytes(), time.monotonic() - start)


class _Events:
    """Reads a control connection's events on a thread of its own."""

    def __init__(self, control: Control) -> None:
        self.control = control
        self.events: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with contextlib.suppress(Exception):
            self.control.sock.settimeout(None)
            for line in self.control.file:
                self.events.append(json.loads(line))

    def close(self) -> None:
        self.thread.join(timeout=10)
        self.control.close()

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == kind]


def _why_not_taken(events: _Events | None) -> tuple[str, bool]:
    """Why a notice was not taken, and whether something held it (rather than the end)."""
    if events is None or not events.kinds("pending"):
        return "the script ended before the runtime took the request", False
    abandoned = events.kinds("abandoned")
    if abandoned:
        last = abandoned[-1]
        return (
            f"abandoned at its {last.get('reason')}, held by: {_summary(last.get('problems', []))}",
            True,
        )
    deferred = events.kinds("deferred")
    if deferred:
        return f"deferred until the script ended, by: {_summary(deferred[-1]['problems'])}", True
    return "the script ended before reaching a safe point (no problem reported)", False


def run_chain(
    program: Program,
    args: list[str],
    work: Path,
    env: dict[str, str],
    logs: Path,
    index: int,
    plan: list[float],
    rng: random.Random,
) -> ChainRun:
    """Run under the runtime; the k-th segment gets a notice ``plan[k]`` s after arming."""
    from portal.capture.image import read_image

    chain = ChainRun(index, plan, work=work)
    env = {**env, "PORTAL_RUNTIME_SIGTERM_GRACE_S": str(DEADLINE_S)}
    sockdir = short_dir()
    ckpt = os.path.join(sockdir, "job.portal")
    sock = os.path.join(sockdir, "ctl.sock")
    cmd = runtime("run", "--checkpoint", ckpt, "--control", sock, program.script, *args)
    try:
        for segment in range(len(plan) + 1):
            tag = f"chain{index}-{segment}"
            proc, out, err = _launch(cmd, work, env, logs, tag)
            control = connect(proc, sock, timeout=120)
            events = _Events(control) if control is not None else None
            notice = None
            if control is not None and segment < len(plan):
                try:
                    proc.wait(timeout=plan[segment])
                    chain.unsent.append(
                        f"segment {segment}: the script ended before its notice was due "
                        f"({plan[segment]:.2f} s)"
                    )
                except subprocess.TimeoutExpired:
                    how = rng.choice(["sigterm", "node"])
                    notice = Notice(index, segment, how, plan[segment], time.time())
                    if how == "sigterm":
                        with contextlib.suppress(ProcessLookupError):
                            proc.send_signal(signal.SIGTERM)
                    else:
                        with contextlib.suppress(OSError):
                            control.pause(within=DEADLINE_S)
            try:
                rc = proc.wait(timeout=900)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
            ended = time.time()
            if events is not None:
                events.close()
            chain.rcs.append(rc)
            seg_err = err.read_bytes()
            # The runtime's own lines (a pause abandoned at its deadline, a restore note) are
            # not the program's output: they are recorded, and the reasons behind them too.
            chain.notes += [
                m.decode(errors="replace").rstrip() for m in RUNTIME_NOTE.findall(seg_err)
            ]
            chain.stdout += out.read_bytes()
            chain.stderr += RUNTIME_NOTE.sub(b"", seg_err)
            if notice is not None:
                chain.notices.append(notice)
                notice.ended = ended
                if events is not None:
                    notice.deferred = [_summary(d["problems"]) for d in events.kinds("deferred")]
                if rc == EXIT_PAUSED:
                    header = read_image(ckpt).header
                    notice.taken = True
                    notice.requested_time = header.requested_time
                    notice.safe_point_time = header.safe_point_time
                    notice.paused_at = header.paused_at
                    if header.problems:
                        notice.problems = [
                            _summary([msgspec.to_builtins(p) for p in header.problems])
                        ]
                else:
                    notice.reason, held = _why_not_taken(events)
                    # Held: the script ran on for more than WITHIN_S after the notice and the
                    # runtime reported what kept it from pausing. (A notice that comes a moment
                    # before the end, in a comprehension say, is not held: the job just ends.)
                    notice.held = held and ended - notice.sent > WITHIN_S
            if rc != EXIT_PAUSED:
                break
            cmd = runtime("resume", "--control", sock, ckpt)
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)
    return chain


# -- comparing --------------------------------------------------------------------------------


def _blank(data: bytes, patterns: tuple[str, ...]) -> str:
    text = data.decode("utf-8", errors="backslashreplace")
    for pattern in patterns:
        text = re.sub(pattern, "<wall-clock>", text)
    # One field however many patterns met there (padding next to an empty match, say).
    return re.sub(r"(?:<wall-clock>)+", "<wall-clock>", text)


def _first_difference(expected: str, got: str) -> str:
    a, b = expected.splitlines(), got.splitlines()
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"line {i + 1}: expected {x[:300]!r}, got {y[:300]!r}"
    if len(a) == len(b):
        return "the same lines but not the same line ends"
    extra = a[len(b)] if len(a) > len(b) else b[len(a)]
    return f"{len(a)} lines expected, {len(b)} got (first extra: {extra[:300]!r})"


_COMPARE_WEIGHTS = """
import sys, torch
a = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
b = torch.load(sys.argv[2], map_location="cpu", weights_only=True)
if list(a) != list(b):
    print("different keys:", list(a), list(b)); sys.exit(1)
for k in a:
    x, y = a[k], b[k]
    if x.dtype != y.dtype or x.shape != y.shape:
        print(f"{k}: {x.dtype}{tuple(x.shape)} vs {y.dtype}{tuple(y.shape)}"); sys.exit(1)
    if x.contiguous().numpy().tobytes() != y.contiguous().numpy().tobytes():
        diff = (x.double() - y.double()).abs().max().item()
        print(f"{k}: not bit-identical (max abs difference {diff!r})"); sys.exit(1)
print("bit-identical", len(a), "tensors")
"""


def compare(program: Program, plain: Output, plain_work: Path, chain: ChainRun) -> list[str]:
    """What differs between the chain and the plain run (empty: identical)."""
    diffs = []
    if chain.rcs[-1] != plain.rc:
        diffs.append(f"exit status {chain.rcs[-1]}, plain run {plain.rc}")
    if any(rc != EXIT_PAUSED for rc in chain.rcs[:-1]):
        diffs.append(f"a segment ended with neither a pause nor the end: {chain.rcs}")
    for name, expected, got in (
        ("stdout", plain.stdout, chain.stdout),
        ("stderr", plain.stderr, chain.stderr),
    ):
        e, g = _blank(expected, program.wall_clock), _blank(got, program.wall_clock)
        if e != g:
            diffs.append(f"{name} differs: {_first_difference(e, g)}")
    assert chain.work is not None
    for name in program.files:
        a, b = plain_work / name, chain.work / name
        if not b.exists() or a.read_bytes() != b.read_bytes():
            diffs.append(f"output file {name} differs" + ("" if b.exists() else " (missing)"))
    if program.weights and chain.rcs[-1] == plain.rc:
        a, b = plain_work / program.weights, chain.work / program.weights
        if not b.exists():
            diffs.append(f"{program.weights} missing")
        else:
            done = subprocess.run(
                [sys.executable, "-c", _COMPARE_WEIGHTS, str(a), str(b)],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if done.returncode != 0:
                diffs.append(f"weights: {(done.stdout + done.stderr).strip()[-500:]}")
    return diffs


# -- reporting --------------------------------------------------------------------------------


@dataclass
class Row:
    program: str
    dist: str
    python: str
    seed: int
    plain_seconds: float
    requested: int
    taken: int
    held: int
    within_1s: int
    identical: int
    runs: int
    median_s: float | None
    max_s: float | None
    median_from_sent_s: float | None
    max_from_sent_s: float | None
    notices: list[dict[str, Any]]
    unsent: list[str]
    notes: list[str]
    failures: list[str]
    known_gap: str | None

    def line(self) -> str:
        def s(x: float | None) -> str:
            return "-" if x is None else f"{x:.3f}"

        return (
            f"{self.program:22} {self.within_1s:>2}/{self.requested:<2} in 1 s "
            f"({self.taken} taken, {self.held} held)  identical {self.identical}/{self.runs}  "
            f"notice->safe point median {s(self.median_s)} s max {s(self.max_s)} s  "
            f"(plain {self.plain_seconds:.1f} s)"
        )


def _row(
    program: Program, plain: Output, chains: list[ChainRun], failures: dict[int, list[str]]
) -> Row:
    notices = [n for c in chains for n in c.notices]
    delays = [n.to_safe_point for n in notices if n.to_safe_point is not None]
    sent = [n.from_sent for n in notices if n.from_sent is not None]
    dist = "ours" if program.dist is None else f"{program.dist.name}=={program.dist.version}"
    return Row(
        program=program.name,
        dist=dist,
        python=PYTHON,
        seed=SEED,
        plain_seconds=round(plain.seconds, 3),
        requested=len(notices),
        taken=sum(n.taken for n in notices),
        held=sum(n.held for n in notices),
        within_1s=sum(n.to_safe_point is not None and n.to_safe_point <= WITHIN_S for n in notices),
        identical=sum(not failures.get(c.index) for c in chains),
        runs=len(chains),
        median_s=statistics.median(delays) if delays else None,
        max_s=max(delays) if delays else None,
        median_from_sent_s=statistics.median(sent) if sent else None,
        max_from_sent_s=max(sent) if sent else None,
        notices=[
            {
                **{k: v for k, v in asdict(n).items()},
                "to_safe_point": n.to_safe_point,
                "from_sent": n.from_sent,
                "status": n.status,
            }
            for n in notices
        ],
        unsent=[u for c in chains for u in c.unsent],
        notes=[f"chain {c.index}: {n}" for c in chains for n in c.notes],
        failures=[f"chain {i}: {d}" for i, ds in sorted(failures.items()) for d in ds],
        known_gap=KNOWN_GAPS.get(program.name),
    )


def _details(row: Row) -> Iterator[str]:
    for n in row.notices:
        if n["taken"]:
            late = "" if n["to_safe_point"] <= WITHIN_S else "  LATE"
            yield (
                f"    chain {n['chain']}.{n['segment']} {n['how']:7} at {n['delay']:.2f} s: "
                f"paused at {n['paused_at']} after {n['to_safe_point']:.3f} s{late}"
                + (f"; waited for: {' | '.join(n['problems'])}" if n["problems"] else "")
            )
        else:
            yield (
                f"    chain {n['chain']}.{n['segment']} {n['how']:7} at {n['delay']:.2f} s: "
                f"NOT TAKEN ({n['status']}): {n['reason']}"
            )
    for u in row.unsent:
        yield f"    not sent: {u}"
    for f in row.failures:
        yield f"    FAILED {f}"


@pytest.fixture(scope="module")
def corpus_report() -> Iterator[list[Row]]:
    rows: list[Row] = []
    yield rows
    if not rows:
        return
    print(
        f"\n{_seed_line()}\nper program: pauses taken within 1 s / requested, identical runs "
        "/ runs, notice->safe point (checkpoint header)"
    )
    for row in rows:
        print(row.line())
    _write_report(rows)


def _write_report(rows: list[Row]) -> None:
    path = os.environ.get("PORTAL_CORPUS_REPORT")
    if not path:
        return
    report = {
        "seed": SEED,
        "python": PYTHON,
        "sample": None if SAMPLE is None else sorted(SAMPLE),
        "programs": [asdict(r) for r in rows],
    }
    Path(path).write_text(json.dumps(report, indent=2, default=str) + "\n")


# -- the test ---------------------------------------------------------------------------------


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_real_program_paused_and_resumed_runs_as_a_plain_run(
    program: Program,
    tmp_path: Path,
    corpus_report: list[Row],
    request: pytest.FixtureRequest,
) -> None:
    print(_seed_line())
    reason = _torch_skip(program)
    if reason:
        pytest.skip(reason)
    if SAMPLE is not None and program.name not in SAMPLE:
        gap = " (a known gap, never sampled)" if program.name in KNOWN_GAPS else ""
        pytest.skip(
            f"not in this run's sample{gap} (seed {SEED}: {sorted(SAMPLE)}); "
            "PORTAL_CORPUS_ALL=1 runs every program"
        )
    if program.name in KNOWN_GAPS:
        request.applymarker(pytest.mark.xfail(strict=False, reason=KNOWN_GAPS[program.name]))

    template = tmp_path / "template"
    template.mkdir()
    try:
        args = program.lay_out(template)
    except Unavailable as exc:
        pytest.skip(str(exc))
    logs = tmp_path / "logs"
    logs.mkdir()
    env = {**os.environ, **program.env}

    def copy(name: str) -> Path:
        return Path(shutil.copytree(template, tmp_path / name, symlinks=True))

    plain_work = copy("plain")
    plain = run_plain(program.script, args, plain_work, env, logs)
    assert plain.rc in (0, 1) and b"Traceback" not in plain.stderr, (
        f"the plain run failed ({plain.rc}): {plain.stderr.decode(errors='replace')[-3000:]}"
    )

    rng = random.Random(f"{SEED}:{program.name}")
    span = max(plain.seconds, 0.5)
    plans = [[rng.uniform(0.05, 0.85 * span)] for _ in range(ONE_NOTICE_CHAINS)]
    plans.append([rng.uniform(0.05, 0.4 * span), rng.uniform(0.05, 0.4 * span)])
    seeds = [rng.randrange(1 << 30) for _ in range(len(plans) + 1)]

    def chain(i: int, plan: list[float]) -> ChainRun:
        return run_chain(
            program, args, copy(f"chain{i}"), env, logs, i, plan, random.Random(seeds[i])
        )

    with ThreadPoolExecutor(1 if program.torch else JOBS) as pool:
        chains = list(pool.map(chain, range(len(plans)), plans))
    if not any(n.taken for c in chains for n in c.notices):
        # Every notice came too late or was never taken: one more, as soon as the runtime is
        # armed, so that each program's test exercises a pause and a resume.
        chains.append(chain(len(plans), [0.0]))

    failures = {c.index: compare(program, plain, plain_work, c) for c in chains}
    failures = {i: d for i, d in failures.items() if d}
    row = _row(program, plain, chains, failures)
    corpus_report.append(row)
    _write_report(corpus_report)
    print(row.line())
    for line in _details(row):
        print(line)

    problems = [f"chain {i} {chains[i].rcs}: {'; '.join(d)}" for i, d in failures.items()]
    problems += [
        f"chain {n.chain}.{n.segment}: a notice ({n.how}) was not taken: {n.reason}"
        for c in chains
        for n in c.notices
        if n.held
    ]
    if not row.taken:
        reasons = sorted({n.reason for c in chains for n in c.notices} | set(row.unsent))
        problems.append(f"no notice was taken as a pause: {' | '.join(reasons)}")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
