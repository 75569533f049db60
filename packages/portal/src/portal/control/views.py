"""What Portal shows about a job, built once for every reader: ``portal status --json``,
``portal explain``, the console's pages and the MCP server's tools all read these objects, so
the CLI, a browser and an agent never disagree about a job.

The objects are plain JSON-ready dicts and lists (they are the public shape of
``status --json`` and of the MCP tools); the CLI's text is rendered from them here too
(:func:`explain_lines`), next to the data it renders.
"""

from __future__ import annotations

import codecs
import contextlib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from portal.control import silence
from portal.control.carry import CARRY_EVENTS, carry_state
from portal.control.checkpoints import STORED_KINDS, job_checkpoints, kept_checkpoint
from portal.control.lineage import output_cuts, superseded_attempts
from portal.control.liveness import reconcile
from portal.control.plane import ControlPlane
from portal.core import units
from portal.core.domain import AttemptState, CheckpointState, Event, Job, JobState
from portal.core.errors import InvalidArgumentError

if TYPE_CHECKING:  # the store's modules load only when it is opened
    from portal.storage import CheckpointStore

__all__ = [
    "CARRY_WARNINGS",
    "EXPLAINED",
    "LOG_STREAMS",
    "MOVE_EVENTS",
    "PLACEMENT_EVENTS",
    "JobViews",
    "checkpoint_check_line",
    "explain_lines",
    "job_row_words",
    "last_frame_of_each_line",
    "unfinished_terminal_code",
    "without_terminal_codes",
]

#: The checkpoint check's event kinds that are warnings (a warn decision, a note on the CLI).
CARRY_WARNINGS = frozenset({"carry-warning", "carry-blocked"})

#: Event kinds that ``portal explain`` lists under the notice they followed.
EXPLAINED = frozenset(
    {
        "pausing",
        "pause-waiting",
        "pause-unreachable",
        "deferred",
        "paused",
        "pause-abandoned",
        "pause-failed",
        "uploaded",
        "upload-failed",
        "suspended",
        "overrun",
        "checkpoint-damaged",
        "checkpoint-repaired",
        "notice-withdrawn",
        "node-died",
        "resuming",
        "failed",  # a resume whose script then failed (its error: status's ``error``)
        "reported-late",
        "silent",
        "machine-check",
        "lost",
        "lost-machine",
    }
)

#: Placement's event kinds (the planner's skips and warnings, the simulated cloud's reclaims,
#: a move, a job that outgrew its spot machine), listed by ``portal explain`` with the policy
#: that decided them: "provision then move under spot".
PLACEMENT_EVENTS = frozenset(
    {
        "placement.skipped",
        "placement.warning",
        "placement.none",
        "spot.provision",
        "spot.move",
        "spot.kept",
        "spot.released",
        "cheaper.provision",
        "cheaper.move",
        "cheaper.released",
        "return.provision",
        "return.move",
        "return.released",
        "reclaimed",
        "provisioned",
        "moving",
    }
)

#: The events that moved a running job to another machine (its next checkpoint is the move's).
MOVE_EVENTS = frozenset({"moving", "spot.move", "cheaper.move", "return.move"})

#: The output files of an attempt, in the order readers show them.
LOG_STREAMS = ("stdout", "stderr")


class JobViews:
    """Read-side views of one control plane (one ``PORTAL_HOME``).

    Opens the checkpoint store only when a view needs it (status and reconciling a running job),
    so listing jobs stays cheap.
    """

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self._store: CheckpointStore | None = None

    @property
    def store(self) -> CheckpointStore:
        """The jobs' checkpoint store (``portal.storage``), opened on first use."""
        if self._store is None:
            from portal.storage import open_store

            self._store = open_store(self.plane.settings, self.plane.plugins)
        return self._store

    def job(self, ref: str) -> Job:
        """A job by id or name, settled first if its node died without reporting."""
        job = self.plane.job(ref)
        latest = None
        if job.state in (JobState.RUNNING, JobState.PAUSING):
            latest = self.store.latest_complete(job.id)
        job = reconcile(self.plane, job, latest, incomplete=lambda: self._incomplete(job.id))
        return silence.settle(self.plane, job, latest)  # the lost-job rules (other machines)

    def _incomplete(self, job_id: str) -> list[str]:
        """The job's checkpoints whose upload was cut short (not resumable, kept)."""
        return [
            r.checkpoint_id
            for r in self.store.list(job_id)
            if r.state is CheckpointState.INCOMPLETE
        ]

    # --- status ---------------------------------------------------------------------------------

    def _latest_workdir(self, job: Job) -> str:
        """The working directory of the latest attempt that started (a simulated machine runs
        the job in its own), else the job's."""
        started = [e for _, e in self.plane.store.events(job.id) if e.kind == "started"]
        for event in reversed(started):
            workdir = event.data.get("workdir")
            if isinstance(workdir, str) and workdir:
                return workdir
        return job.workdir

    def status(self, job: Job, *, recorded_only: bool = False) -> dict[str, Any]:
        """The object ``portal status --json`` prints (and the MCP's ``status(job)`` returns).

        ``recorded_only``: as far as the control plane's records tell it, for a reader without
        the job's key (the checkpoint store needs it): the last checkpoint is the last one
        recorded stored, not checked against the store, and the listings that need the store
        (incomplete, damaged, kept checkpoints; what a silent job waits for) are empty."""
        attempts = self.plane.store.attempts(job.id)
        events = [e for _, e in self.plane.store.events(job.id)]
        heard = self.plane.store.last_heard(job.id)
        if recorded_only:
            checkpoints: list[Any] = []
            last_checkpoint = _last_recorded(events)
        else:
            checkpoints = job_checkpoints(self.plane, self.store, job.id, events=events)
            usable = [c for c in checkpoints if c.resumable]
            latest = usable[-1] if usable else None
            last_checkpoint = (
                None
                if latest is None
                else {"id": latest.id, "bytes": latest.bytes, "created_at": latest.created_at}
            )
        return {
            "job": job.id,
            "name": job.name,
            "state": str(job.state),
            "script": job.script,
            "args": list(job.args),
            "ranks": job.nproc_per_node or 1,
            "workdir": self._latest_workdir(job),
            "attempts": [
                {
                    "number": a.number,
                    "machine": a.machine,
                    "state": str(a.state),
                    "started_at": a.started_at,
                    "ended_at": a.ended_at,
                    "exit_code": a.exit_code,
                    "resumed_from": a.resumed_from,
                }
                for a in attempts
            ],
            "last_checkpoint": last_checkpoint,
            "last_heard": heard,
            "waiting_for": None if recorded_only else _waiting_for(self.plane, job),
            "incomplete_checkpoints": [
                {
                    "id": c.id,
                    "resumable": False,
                    "note": "its upload was cut short; kept for inspection",
                }
                for c in checkpoints
                if c.state == "incomplete"
            ],
            # Stored complete once, and no longer intact or there (see portal.control.checkpoints).
            "damaged_checkpoints": [
                {"id": c.id, "state": c.state, "why": c.why}
                for c in checkpoints
                if c.state in ("damaged", "missing")
            ],
            "kept_checkpoint": None if recorded_only else _kept(events),
            "carry": carry_state(events),
            "lost_during_notice": _lost_during_notice(self.plane, job, attempts),
            "error": self._failure_line(job, attempts),
        }

    def _failure_line(self, job: Job, attempts: Sequence[Any]) -> str | None:
        """Why a failed job failed, in its own words: the last line its last attempt wrote to
        stderr (a traceback's last line names the exception), as a terminal shows it; None for
        a job that has not failed, or one that said nothing."""
        if job.state is not JobState.FAILED or not attempts:
            return None
        path = self.plane.paths(job.id).stderr(attempts[-1].number)
        try:
            with path.open("rb") as f:
                f.seek(max(0, path.stat().st_size - _FAILURE_TAIL))
                tail = f.read().decode("utf-8", "replace")
        except OSError:
            return None
        lines = without_terminal_codes(last_frame_of_each_line(tail)).splitlines()
        said = [line.strip() for line in lines if line.strip()]
        return said[-1][:_FAILURE_LINE] if said else None

    def recorded_checkpoint(self, job: Job) -> dict[str, Any] | None:
        """The last checkpoint the control plane recorded as stored (``id``, ``bytes``,
        ``created_at``), or None: whether a job has any to resume from, without the store."""
        return _last_recorded([e for _, e in self.plane.store.events(job.id)])

    # --- jobs -----------------------------------------------------------------------------------

    def jobs(self) -> list[dict[str, Any]]:
        """Every job, oldest first: the rows of ``portal jobs`` (and ``--json``, the console's
        list, the MCP's ``jobs``). Read from the control plane alone (its attempts and events),
        so a job whose key or store is elsewhere is listed like any other; ``status`` is the
        exact account of a job's checkpoints, which reads the store."""
        rows = [self._job_row(job) for job in self.plane.store.list_jobs()]
        # Other tools' jobs under this home (bladekit's runs), through the plugins that list them.
        rows.extend(self.plane.plugins.job_listings(str(self.plane.home)))
        return sorted(rows, key=lambda row: float(row.get("created_at") or 0.0))

    def _job_row(self, job: Job) -> dict[str, Any]:
        attempts = self.plane.store.attempts(job.id)
        events = [e for _, e in self.plane.store.events(job.id)]
        started = attempts[0].started_at if attempts else None
        ended = attempts[-1].ended_at if attempts else None
        live = job.state in (JobState.RUNNING, JobState.PAUSING)
        end = self.plane.clock.now() if live or ended is None else ended
        carry = carry_state(events)
        return {
            "job": job.id,
            "name": job.name,
            "state": str(job.state),
            "script": job.script,
            "created_at": job.created_at,
            "started_at": started,
            "ended_at": None if live else ended,
            # Wall time from its first start to its end (or now), suspensions included.
            "duration_s": None if started is None else max(0.0, end - started),
            "attempts": len(attempts),
            "recoveries": sum(a.resumed_from is not None for a in attempts),
            "machine": attempts[-1].machine if attempts else None,
            "last_checkpoint": _last_recorded(events),
            "carry": _carry_word(carry),
            "error": self._failure_line(job, attempts),
            "source": "portal",
        }

    # --- explain and the timeline ---------------------------------------------------------------

    def explain(self, job: Job) -> dict[str, Any]:
        """Every notice and what was decided at it, and the checkpoint check's decisions."""
        events = [e for _, e in self.plane.store.events(job.id)]
        notices: list[dict[str, Any]] = []
        for event in events:
            if event.kind == "notice":
                notices.append(
                    {
                        "at": event.at,
                        "message": event.message,
                        "provider": event.data.get("provider"),
                        "source": event.data.get("source"),
                        "notice_s": float(event.data.get("notice_s", 0)),
                        "deadline": float(event.data.get("deadline", 0)),
                        "decisions": [],
                    }
                )
            elif notices and event.kind in EXPLAINED:
                notices[-1]["decisions"].append(
                    {"at": event.at, "kind": event.kind, "message": event.message}
                )
        checks = [
            {
                # The warning is a warn decision of policy spot on a spot machine, of the
                # checkpoint policy elsewhere (the spec).
                "decision": _carry_decision(event),
                "policy": "spot" if event.data.get("purchase") == "spot" else "checkpoint",
                "at": event.at,
                "kind": event.kind,
                "message": event.message,
            }
            for event in events
            if event.kind in CARRY_EVENTS
        ]
        placement = [
            {
                "decision": str(event.data.get("verdict") or event.kind.rpartition(".")[2]),
                "policy": str(event.data.get("policy") or _placement_policy(event.kind)),
                "at": event.at,
                "kind": event.kind,
                "message": event.message,
            }
            for event in events
            if event.kind in PLACEMENT_EVENTS
        ]
        return {
            "job": job.id,
            "notices": notices,
            "checkpoint_check": checks,
            "placement": placement,
        }

    def timeline(self, job: Job, *, after: int = 0) -> list[dict[str, Any]]:
        """The job's events after sequence number ``after``, each with its decision if any."""
        return [
            {
                "seq": seq,
                "at": event.at,
                "kind": event.kind,
                "message": event.message,
                "decision": _carry_decision(event) if event.kind in CARRY_EVENTS else None,
            }
            for seq, event in self.plane.store.events(job.id, after=after)
        ]

    # --- logs -----------------------------------------------------------------------------------

    def log_notes(self, job: Job) -> dict[int, tuple[str, int | None, int | None]]:
        """``{attempt: (why, stdout bytes kept, stderr bytes kept)}`` for each attempt whose
        output is not all kept work, as ``portal logs`` shows it: one whose work a later attempt
        redid keeps nothing (0, 0); one that made the periodic checkpoint a later attempt
        resumed from keeps its output up to that checkpoint."""
        notes: dict[int, tuple[str, int | None, int | None]] = {
            number: (why, 0, 0) for number, why in superseded_attempts(self.plane, job).items()
        }
        for number, cut in output_cuts(self.plane, job).items():
            notes.setdefault(number, (cut.why, cut.stdout_bytes, cut.stderr_bytes))
        return notes

    def read_log(
        self,
        job: Job,
        attempt: int,
        stream: str,
        *,
        offset: int = 0,
        limit: int = 1 << 20,
        kept: int | None = None,
    ) -> tuple[str, int]:
        """What attempt ``attempt``'s ``stream`` holds from byte ``offset``: its text and the
        offset to ask from next. Stops before a character split across the end, so a reader
        that follows a growing file never shows half of one. ``kept``: the stream's bytes that
        are kept work (from :meth:`log_notes`); nothing past them is read."""
        if stream not in LOG_STREAMS:
            raise InvalidArgumentError(
                f"log stream {stream!r} is not one of {', '.join(LOG_STREAMS)}: ask for stdout "
                "or stderr"
            )
        numbers = len(self.plane.store.attempts(job.id))
        if not 1 <= attempt <= numbers:
            raise InvalidArgumentError(
                f"job {job.id} has no attempt {attempt}: it has {numbers} (`portal status "
                f"{job.name or job.id}` lists them)"
            )
        if offset < 0 or limit < 1:
            raise InvalidArgumentError(
                f"offset {offset} and limit {limit}: give an offset of 0 or more and a limit of 1 "
                "or more bytes"
            )
        path = self.plane.paths(job.id).attempt(attempt) / stream
        end = _log_end(path, kept)
        if offset >= end:  # nothing there yet (or past what is kept): ask again from here
            return "", offset
        limit = min(limit, end - offset)  # never more than the file holds, however much asked
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read(limit)
        if offset > 0:
            # An offset inside a character (the last N bytes of a log, say): start at the next
            # one, never with the replacement mark for its cut first bytes.
            skip = 0
            while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
                skip += 1
            data = data[skip:]
            offset += skip
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(data, final=False)
        pending = len(decoder.getstate()[0])
        if pending == len(data) and len(data) < limit:
            return "", offset  # only the start of a character so far: wait for the rest
        if pending == len(data):  # a limit that cuts every byte short: show them as they are
            return decoder.decode(b"", final=True), offset + len(data)
        return text, offset + len(data) - pending

    def log_tail_start(
        self, job: Job, attempt: int, stream: str, *, tail: int, kept: int | None = None
    ) -> int:
        """Where the last ``tail`` bytes of a log begin, moved on to the start of a line: a
        reader that opens a long log at its end (the console) shows whole lines, and says that
        earlier output is left out when this is above 0."""
        path = self.plane.paths(job.id).attempt(attempt) / stream
        end = _log_end(path, kept)
        start = max(0, end - max(1, tail))
        if start == 0:
            return 0
        with path.open("rb") as f:
            f.seek(start - 1)
            window = f.read(end - start + 1)
        line_end = window.find(b"\n")
        return start + line_end if 0 <= line_end < len(window) - 1 else start

    def logs(
        self, job: Job, *, max_bytes: int = 1 << 20, as_shown: bool = False
    ) -> list[dict[str, Any]]:
        """Each attempt's output (its last ``max_bytes`` per stream): what ``portal logs``
        prints, kept apart per attempt and stream since their interleaving is not recorded.
        Output whose work a later attempt did again is left out, and ``note`` says why.
        ``as_shown``: as a terminal shows it, for a reader that is none (an agent): a progress
        bar's frames (each ended by ``\r``, redrawn in place) only as the last state each line
        showed, and no colour or cursor codes."""
        result = []
        paths = self.plane.paths(job.id)
        notes = self.log_notes(job)
        for attempt in self.plane.store.attempts(job.id):
            entry: dict[str, Any] = {"attempt": attempt.number, "state": str(attempt.state)}
            why, *kept_bytes = notes.get(attempt.number, (None, None, None))
            for stream, kept in zip(LOG_STREAMS, kept_bytes, strict=True):
                path = paths.attempt(attempt.number) / stream
                size = path.stat().st_size if path.exists() else 0
                if kept is not None:
                    size = min(size, kept)
                start = max(0, size - max_bytes)
                text, _ = self.read_log(
                    job, attempt.number, stream, offset=start, limit=max_bytes, kept=kept
                )
                if as_shown:
                    text = without_terminal_codes(last_frame_of_each_line(text))
                entry[stream] = text
                entry[f"{stream}_truncated"] = start > 0
            if why is not None:
                entry["note"] = why
            result.append(entry)
        return result


def _log_end(path: Path, kept: int | None) -> int:
    """Where a log's readable bytes end: its size (0 before it exists), or ``kept`` when a later
    attempt did the rest again."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    return size if kept is None else min(size, kept)


def job_row_words(row: dict[str, Any], now: float) -> dict[str, str]:
    """A row of :meth:`JobViews.jobs` in words, as ``portal jobs`` and the console both show
    it: ``submitted`` (``3m ago``), ``duration`` (``12m30s``; ``-`` before a start),
    ``attempts`` (``2 (1 resumed)``) and ``last_checkpoint`` (``24.2 kB, 4s ago``; ``-``)."""
    last = row["last_checkpoint"]
    checkpoint = "-"
    if last is not None:
        size = units.size(last["bytes"]) if last["bytes"] is not None else "?"
        checkpoint = f"{size}, {units.age(now - last['created_at'])} ago"
    resumed = f" ({row['recoveries']} resumed)" if row["recoveries"] else ""
    return {
        "submitted": f"{units.age(now - row['created_at'])} ago",
        "duration": "-" if row["duration_s"] is None else units.duration(row["duration_s"]),
        "attempts": f"{row['attempts']}{resumed}",
        "last_checkpoint": checkpoint,
    }


#: How much of a failed attempt's stderr is read for its last line, and how much of that line is
#: shown (a traceback's last line; a line of a megabyte is cut).
_FAILURE_TAIL = 16 * 1024
_FAILURE_LINE = 500

#: A terminal's control sequences: colours and cursor moves (CSI), titles (OSC), and the
#: two-character escapes. A reader that is no terminal (a web page, an agent) shows text.
_TERMINAL_CODES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def without_terminal_codes(text: str) -> str:
    """``text`` without a terminal's control sequences (``\x1b[32m`` and the like): what a
    terminal would show, for a reader that is not one."""
    return _TERMINAL_CODES.sub("", text) if "\x1b" in text else text


def unfinished_terminal_code(text: str) -> int:
    """How many characters at the end of ``text`` are the start of a control sequence whose
    rest has not been read yet (0: none): a reader of a growing log holds them back."""
    start = text.rfind("\x1b", max(0, len(text) - 64))
    if start < 0 or _TERMINAL_CODES.match(text, start) or not text[start:].isascii():
        return 0
    return len(text) - start


def last_frame_of_each_line(text: str) -> str:
    """``text`` as a terminal leaves it: of the frames a line was redrawn with (``\r``, as
    tqdm draws), only the last that showed anything (``\r\n`` stays a line end)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if "\r" in line.rstrip("\r"):
            frames = [frame for frame in line.split("\r") if frame]
            lines[i] = frames[-1] if frames else ""
    return "\n".join(lines)


def _kept(events: Iterable[Event]) -> dict[str, Any] | None:
    """A paused attempt's checkpoint kept on this machine, not stored (its upload failed)."""
    found = kept_checkpoint(events)
    if found is None:
        return None
    path, attempt = found
    with contextlib.suppress(OSError):  # (gone this instant: stored by a resume, say)
        return {"path": str(path), "attempt": attempt, "bytes": path.stat().st_size}
    return None


def _waiting_for(plane: ControlPlane, job: Job) -> str | None:
    """While the node is silent, what Portal waits for before it may call the job lost."""
    assessment = silence.assess(plane, job)
    if assessment is None or not assessment.silent:
        return None
    return assessment.waiting_for or None


def _carry_decision(event: Event) -> str:
    return "warn" if event.kind in CARRY_WARNINGS else "info"


def explain_lines(explained: dict[str, Any]) -> list[str]:
    """``portal explain``'s text, from :meth:`JobViews.explain`'s object."""
    notices: Sequence[dict[str, Any]] = explained["notices"]
    lines = [f"job {explained['job']}: {len(notices)} notice(s)"]
    if not notices:
        lines.append("  no notice so far")
    for index, notice in enumerate(notices, start=1):
        lines.append(f"notice {index} at {units.clock(notice['at'])}: {notice['message']}")
        lines.append(
            f"  figures: provider {notice['provider']}, source {notice['source']}, notice "
            f"{notice['notice_s']:.0f} s, deadline {units.clock(notice['deadline'])}"
        )
        for decision in notice["decisions"]:
            lines.append(
                f"  {units.clock(decision['at'])} {decision['kind']}: {decision['message']}"
            )
    checks = explained["checkpoint_check"]
    lines.append(f"checkpoint check: {len(checks)} decision(s)")
    for check in checks:
        lines.append(
            f"  {check['decision']} ({check['policy']}) at {units.clock(check['at'])}, "
            f"{check['kind']}: {check['message']}"
        )
    placement = explained.get("placement", [])
    if placement:
        lines.append(f"placement: {len(placement)} decision(s)")
        for decision in placement:
            lines.append(
                f"  {decision['decision']} (policy {decision['policy']}) at "
                f"{units.clock(decision['at'])}, {decision['kind']}: {decision['message']}"
            )
    return lines


def _placement_policy(kind: str) -> str:
    """The policy an event without a ``policy`` figure belongs to, by its kind."""
    policy = kind.split(".", 1)[0]
    if policy in ("spot", "cheaper", "return"):
        return policy
    if kind == "reclaimed":
        return "provider"
    return "placement"


def checkpoint_check_line(carry: dict[str, Any], now: float) -> str:
    """The console's Overview line "Checkpoint check": when the last check passed, or what it
    found (the banner above says the whole sentence)."""
    if carry["blocked"] is not None:
        return "blocked: no pause point came in time (see the banner)"
    if carry["ok"] is None:
        return "not checked yet"
    if carry["ok"]:
        return f"passed {units.ago(now - float(carry['checked_at']))}"
    names = ", ".join(
        f"{p.get('name')} ({p.get('type_name')})" if p.get("type_name") else str(p.get("name"))
        for p in carry["problems"]
    )
    count = len(carry["problems"])
    return f"{count} problem{'s' if count != 1 else ''}: cannot carry {names} (see the banner)"


def _lost_during_notice(plane: ControlPlane, job: Job, attempts: list[Any]) -> bool:
    """Whether the job's last attempt was lost while it had a notice to pause for: its node
    died in the pause, which is not "without notice"."""
    if not attempts or attempts[-1].state is not AttemptState.LOST:
        return False
    last = attempts[-1]
    end = last.ended_at if last.ended_at is not None else float("inf")
    return any(
        e.kind == "notice" and last.started_at <= e.at <= end for _, e in plane.store.events(job.id)
    )


def _last_recorded(events: Sequence[Event]) -> dict[str, Any] | None:
    """The last checkpoint the control plane recorded as stored, with its size when an event
    gave it: ``{"id", "bytes", "created_at"}``."""
    last: dict[str, Any] | None = None
    for event in events:
        ckpt = event.data.get("checkpoint")
        if event.kind not in STORED_KINDS or not isinstance(ckpt, str) or not ckpt:
            continue
        if last is None or last["id"] != ckpt:
            last = {"id": ckpt, "bytes": None, "created_at": event.at}
        size = event.data.get("bytes")
        if isinstance(size, int | float) and not isinstance(size, bool):
            last["bytes"] = int(size)
    return last


def _carry_word(carry: dict[str, Any]) -> str | None:
    """The checkpoint check's verdict in a word or two: ``ok``, ``2 problems``, ``blocked``;
    None before a check finished."""
    if carry.get("blocked"):
        return "blocked"
    problems = len(carry.get("problems") or ())
    if problems:
        return f"{problems} problem" + ("s" if problems > 1 else "")
    if carry.get("ok") is None:
        return None
    return "ok"
