"""The ``portal`` commands themselves (:class:`Cli`), imported by :func:`portal.cli.main.main`
only once the command line has been parsed: ``portal --help``, ``portal completion`` and a usage
error never pay for the control plane, the node, capture or the policies.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from portal.cli.exits import EXIT_PORTAL, EXIT_SUSPENDED, note
from portal.cli.progress import ProgressLine
from portal.control import wording
from portal.control.lineage import output_cuts, superseded_attempts
from portal.control.output_order import ordered_pieces
from portal.control.views import CARRY_WARNINGS, explain_lines, job_row_words
from portal.core import units
from portal.core.domain import AttemptState, Job, JobState
from portal.core.errors import InvalidArgumentError
from portal.jobs import NotPlacedError, Placement, Portal, Started

__all__ = ["Cli"]

#: ``portal resume``'s exit status when no offer is left and the job stays suspended.
EXIT_STAYS = EXIT_SUSPENDED
#: ``portal run`` and ``portal move``'s exit status when no offer is left: nothing changed.
EXIT_NOT_PLACED = 1


class Cli:
    """Each ``portal`` command: its options to :class:`portal.jobs.Portal`'s action, and the
    answer in words."""

    def __init__(self) -> None:
        self.portal = Portal.open()
        self.plane = self.portal.plane
        self.views = self.portal.views  # what status, explain (and the console) show

    def close(self) -> None:
        """Close the control plane's connection (a command run in process, as tests and
        embedders do, leaves no database open behind it)."""
        self.portal.close()

    def job(self, ref: str) -> Job:
        return self.portal.job(ref)

    # --- starting attempts ----------------------------------------------------------------------

    def run(self, options: argparse.Namespace) -> int:
        placement = _placement(options, state_gib=options.state_gib)
        asked = dict(
            args=options.args,
            name=options.name,
            placement=placement,
            checkpoint_every=options.checkpoint_every,
        )
        if options.plan:
            print(self.portal.plan_run(options.script, **asked))
            return 0
        try:
            started = self.portal.run(
                options.script, nproc_per_node=options.nproc_per_node, **asked
            )
        except NotPlacedError as exc:
            _say(exc.said)
            note(exc.outcome)
            return EXIT_NOT_PLACED
        _say(started.said)
        return self._started(started, "started", options.detach)

    def resume(self, options: argparse.Namespace) -> int:
        placement = _placement(options)
        asked = dict(
            checkpoint=options.checkpoint,
            use_earlier=options.use_earlier,
            placement=placement,
            checkpoint_every=options.checkpoint_every,
            confirm=_confirm if _interactive() else None,
        )
        if options.plan:
            plan, said = self.portal.plan_resume(options.job, workdir=options.workdir, **asked)
            _say(said)
            print(plan)
            return 0
        try:
            started = self.portal.resume(options.job, workdir=options.workdir, **asked)
        except NotPlacedError as exc:
            _say(exc.said)
            note(exc.outcome)
            return EXIT_STAYS
        _say(started.said)
        return self._started(
            started, f"resuming from checkpoint {started.checkpoint}", options.detach
        )

    def _started(self, started: Started, doing: str, detach: bool) -> int:
        """``--detach``: the job's id, for scripts; else its output followed to its end."""
        job = started.job
        if detach:
            print(job.id, flush=True)
            return 0
        where = "" if started.machine == "local" else f" on {started.machine}"
        named = f" ({job.name})" if job.name and doing == "started" else ""
        note(f"job {job.id} {doing}{where}{named}")
        return self.follow(job, started.attempt)

    def move(self, options: argparse.Namespace) -> int:
        placement = _placement(options)
        if options.plan:
            print(self.portal.plan_move(options.job, placement=placement))
            return 0
        try:
            moved = self.portal.move(options.job, placement=placement)
        except NotPlacedError as exc:
            _say(exc.said)
            note(exc.outcome)
            return EXIT_NOT_PLACED
        _say(moved.said)
        note(
            f"job {moved.job.id} moved from {moved.source} to {moved.target} (checkpoint "
            f"{moved.checkpoint})"
        )
        return 0

    # --- following output -----------------------------------------------------------------------

    def follow(self, job: Job, attempt: int) -> int:
        """Copy the attempt's output to ours until it ends; exit as the script did."""
        paths = self.plane.paths(job.id)
        out, err = _Tail(paths.stdout(attempt)), _Tail(paths.stderr(attempt))
        seen_events = max((seq for seq, _ in self.plane.store.events(job.id)), default=0)
        bar = ProgressLine(sys.stderr)
        refused = False  # the runtime refused: a Portal error, not the script's exit code
        while True:
            job = self.job(job.id)
            current = self.plane.store.attempts(job.id)[attempt - 1]
            ended = current.state is not AttemptState.RUNNING
            out.copy(sys.stdout)
            err.copy(sys.stderr)
            for seq, event in self.plane.store.events(job.id, after=seen_events):
                seen_events = seq
                refused = refused or event.kind == "portal-error"
                if event.kind == "upload-progress":
                    bar.update(event.data)
                elif event.kind in _NOTED:
                    bar.end()
                    note(event.message)
            if ended:
                break
            time.sleep(0.05)
        bar.end()
        out.copy(sys.stdout)
        err.copy(sys.stderr)
        if current.state is AttemptState.SUSPENDED:
            note(f"job {job.id} is suspended; resume it with `{wording.resume_hint(job)}`")
            return EXIT_SUSPENDED
        if current.state is AttemptState.LOST:
            return EXIT_SUSPENDED if job.state is JobState.SUSPENDED else EXIT_PORTAL
        if refused:
            return EXIT_PORTAL
        return current.exit_code if current.exit_code is not None else EXIT_PORTAL

    # --- reading -------------------------------------------------------------------------------

    def notice(self, options: argparse.Namespace) -> int:
        sent = self.portal.notice(options.job, options.seconds)
        note(
            f"notice {sent.notice_id} delivered to job {sent.job.id}'s machine: it goes in "
            f"{sent.seconds:g} s"
        )
        return 0

    def status_data(self, job: Job) -> dict[str, Any]:
        return self.views.status(job)

    def status(self, options: argparse.Namespace) -> int:
        if options.job is None:  # every job: the table `portal jobs` prints
            return self.jobs(options)
        job = self.job(options.job)
        data = self.status_data(job)
        if options.json:
            print(json.dumps(data, indent=2))
            return 0
        print(f"job       {job.id}" + (f" ({job.name})" if job.name else ""))
        print(f"state     {job.state}")
        print(f"script    {job.script} {' '.join(job.args)}".rstrip())
        if job.nproc_per_node:
            print(f"ranks     {job.nproc_per_node} (torch.distributed, launched by Portal)")
        print(f"workdir   {data['workdir']}")
        print(f"attempts  {len(data['attempts'])}")
        for a in data["attempts"]:
            code = "" if a["exit_code"] is None else f", exit {a['exit_code']}"
            print(f"  #{a['number']} {a['machine']}: {a['state']}{code}")
        if data["error"]:  # a failed job's last words on stderr: why it failed
            print(f"error     {data['error']}")
        ckpt = data["last_checkpoint"]
        if ckpt:
            print(
                f"checkpoint {ckpt['id']} ({units.size(ckpt['bytes'])}, "
                f"{units.clock(ckpt['created_at'])})"
            )
        else:
            print("checkpoint none complete")
        last = data["attempts"][-1] if data["attempts"] else None
        if last and last["state"] == "lost" and ckpt and job.state is not JobState.RUNNING:
            how = (
                "stopped during the pause for its notice, before its checkpoint was stored"
                if data.get("lost_during_notice")
                else "stopped without notice"
            )
            print(f"lost      attempt {last['number']} {how}: {wording.lost_way_out(job)}")
        kept = data.get("kept_checkpoint")
        if kept:
            print(
                f"kept      attempt {kept['attempt']}'s checkpoint ({units.size(kept['bytes'])}) "
                f"is on this machine only, at {kept['path']}: its upload failed. `portal resume "
                f"{options.job}` stores it first and continues from it"
            )
        for partial in data.get("incomplete_checkpoints", []):
            print(f"  {partial['id']}: incomplete, not resumable ({partial['note']})")
        for bad in data.get("damaged_checkpoints", []):
            print(f"  {bad['id']}: {bad['state']}, not resumable ({bad['why']})")
        if data.get("waiting_for"):
            print(f"silent    {data['waiting_for']}")
        carry = data["carry"]
        if carry["ok"] is None:
            print("carry     not checked yet")
        elif carry["ok"]:
            print("carry     ok: a checkpoint can carry the whole state")
        else:
            print(f"carry     {'blocked' if carry['blocked'] else 'warning'}: {carry['warning']}")
        return 0

    def wait(self, options: argparse.Namespace) -> int:
        job = self.portal.wait(options.job, timeout=options.timeout)
        print(job.state)
        if job.state in (JobState.RUNNING, JobState.PAUSING):
            note(f"job {job.id} is still {job.state} after {options.timeout:g} s")
            return 1
        return 0

    def logs(self, options: argparse.Namespace) -> int:
        """``portal logs JOB [-f] [--stream both|stdout|stderr]``: every attempt's output, its
        stdout and stderr interleaved as they were written (the node's index of when each grew),
        stdout to stdout and stderr to stderr; ``-f`` follows the job into its next attempts."""
        job = self.job(options.job)
        paths = self.plane.paths(job.id)
        streams = ("stdout", "stderr") if options.stream == "both" else (options.stream,)
        number = 1
        seen_events = 0
        waiting = False  # following a suspended job, told once, until its next attempt starts
        while True:
            attempts = self.plane.store.attempts(job.id)
            if number > len(attempts):
                if options.follow and job.state is JobState.SUSPENDED and not waiting:
                    waiting = True
                    note(
                        f"job {job.id} is suspended; resume it with `{wording.resume_hint(job)}`"
                        " (following: its next attempt's output comes here; Ctrl-C stops)"
                    )
                if not options.follow or job.state.is_final:
                    return 0
                time.sleep(0.2)
                job = self.job(job.id)
                continue
            waiting = False
            if options.follow and number > 1:  # where each part ran, as it is followed
                attempt = attempts[number - 1]
                origin = (
                    f", resumed from checkpoint {attempt.resumed_from}"
                    if attempt.resumed_from
                    else ""
                )
                note(f"attempt {number} on {attempt.machine}{origin}:")
            skipped = superseded_attempts(self.plane, job).get(number)
            if skipped is not None:  # its work was done again: its output would show twice
                note(skipped)
                number += 1
                continue
            cut = output_cuts(self.plane, job).get(number)
            out = _Tail(paths.stdout(number), limit=cut.stdout_bytes if cut else None)
            err = _Tail(paths.stderr(number), limit=cut.stderr_bytes if cut else None)
            if "stdout" not in streams:
                out.limit = 0
            if "stderr" not in streams:
                err.limit = 0
            _replay_in_order(out, err, paths.output_index(number))
            while True:
                running = (
                    self.plane.store.attempts(job.id)[number - 1].state is AttemptState.RUNNING
                )
                out.copy(sys.stdout)
                err.copy(sys.stderr)
                if options.follow:
                    seen_events = self._note_carry(job, seen_events)
                if not (options.follow and running):
                    break
                time.sleep(0.1)
                job = self.job(job.id)
            out.copy(sys.stdout)
            err.copy(sys.stderr)
            if cut is not None:  # the rest was done again by a later attempt
                note(cut.why)
            number += 1

    def _note_carry(self, job: Job, after: int) -> int:
        """Print the checkpoint check's warnings that appeared since event ``after``."""
        for seq, event in self.plane.store.events(job.id, after=after):
            after = seq
            if event.kind in _CARRY_NOTED:
                note(event.message)
        return after

    def explain(self, options: argparse.Namespace) -> int:
        job = self.job(options.job)
        explained = self.views.explain(job)
        if options.json:
            print(json.dumps(explained, indent=2))
            return 0
        for line in explain_lines(explained):
            print(line)
        return 0

    def checkpoints(self, options: argparse.Namespace) -> int:
        """``portal checkpoints JOB [--verify] [--json]``: each checkpoint, its state and why."""
        job = self.job(options.job)
        views = self.portal.checkpoints(job, verify=options.verify)
        if options.json:
            print(json.dumps([v.to_dict() for v in views], indent=2))
            return 0
        if not views:
            print(f"job {job.id} has no checkpoints")
            return 0
        rows = [("CHECKPOINT", "STORED", "SIZE", "STATE", "WHY")]
        for v in views:
            rows.append(
                (
                    v.id,
                    units.clock(v.created_at) if v.created_at else "-",
                    units.size(v.bytes) if v.bytes else "-",
                    v.state,
                    v.why,
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if options.verify:
            for v in views:
                if v.repaired:
                    note(
                        f"checkpoint {v.id} was marked damaged and reads whole again: the mark "
                        "is cleared, and it can be resumed"
                    )
            intact = sum(v.resumable for v in views)
            note(f"verified every chunk: {intact} of {len(views)} checkpoint(s) can be resumed")
        return 0

    def jobs(self, options: argparse.Namespace) -> int:
        """``portal jobs [--json]``: every job, oldest first: when it was submitted, how long it
        has run, its state, where its last attempt ran, its attempts (and how many were
        recoveries), its last checkpoint (size, age), the checkpoint check's verdict, its script.
        ``--json``: the same rows as objects (schema in docs/cli-json.md)."""
        listed = self.views.jobs()
        if options.json:
            print(json.dumps(listed, indent=2))
            return 0
        from portal.cli.table import STATE_STYLES, print_table

        now = self.plane.clock.now()
        headers = (
            "JOB",
            "NAME",
            "SUBMITTED",
            "DURATION",
            "STATE",
            "MACHINE",
            "ATTEMPTS",
            "LAST CHECKPOINT",
            "CARRY",
            "SCRIPT",
        )
        rows = []
        for j in listed:
            words = job_row_words(j, now)
            rows.append(
                (
                    j["job"],
                    j["name"] or "-",
                    words["submitted"],
                    words["duration"],
                    j["state"],
                    j["machine"] or "-",
                    words["attempts"],
                    words["last_checkpoint"],
                    j["carry"] or "-",
                    j["script"],
                )
            )
        print_table(headers, rows, styles={4: STATE_STYLES})
        if not rows:  # the header alone, on stdout; the way on, for people, on stderr
            note(f"no jobs yet {self._where_jobs_are()}: start one with `portal run SCRIPT`")
        return 0

    def _where_jobs_are(self) -> str:
        """Which jobs a listing shows, in words: another PORTAL_HOME or control plane has its
        own (the first thing to check when a job seems to be gone)."""
        from portal.control.config import remote_control

        remote = remote_control(self.plane.settings)
        if remote is not None:
            return f"on the control plane at {remote.url}"
        database = self.plane.settings.control_db
        if database == "sqlite":
            return f"under PORTAL_HOME {self.plane.home}"
        if database.startswith(("postgresql://", "postgres://")):
            return "in the PostgreSQL control plane (PORTAL_CONTROL_DB)"
        return f"in {database}"

    def plugins(self, options: argparse.Namespace) -> int:
        """``portal plugins [--json]``: each plugin loaded (its distribution, version and hooks),
        what each registers, and the ones that failed to load, with why and the way out."""
        from portal.cli.table import print_table

        plugins = self.plane.plugins
        loaded = plugins.plugins()
        rows = plugins.inventory()
        failures = [f.describe() for f in plugins.load_failures]
        if options.json:
            print(json.dumps({"plugins": loaded, "registered": rows, "failed": failures}, indent=2))
            return 0
        print_table(
            ("PLUGIN", "DISTRIBUTION", "VERSION", "HOOKS"),
            [
                (p["name"], p["distribution"] or "-", p["version"] or "-", ", ".join(p["hooks"]))
                for p in loaded
            ],
        )
        print()
        print_table(
            ("KIND", "NAME", "DISTRIBUTION", "WHAT"),
            [
                (
                    r["kind"],
                    r["name"],
                    r["distribution"],
                    r.get("description") or r.get("error", ""),
                )
                for r in rows
            ],
        )
        for failure in failures:
            note(failure)
        return 1 if failures or any("error" in r for r in rows) else 0

    def cancel(self, options: argparse.Namespace) -> int:
        note(self.portal.cancel(options.job).message)
        return 0

    # --- the console and the MCP server (the portal-console distribution) -----------------------

    def console(self, options: argparse.Namespace) -> int:
        return int(
            _console_part("web").serve(
                self.views, port=options.port, announce=note, auth=options.auth
            )
        )

    def mcp(self, options: argparse.Namespace) -> int:
        return int(_console_part("mcp_server").serve(self.portal))


def _console_part(name: str) -> Any:
    """A module of ``portal.console``, imported only when its command runs: the console and
    the MCP server are a separate distribution, so ``portal`` works without their web stack."""
    import importlib
    import importlib.util

    extra, command = ("mcp", "portal mcp") if name == "mcp_server" else ("web", "portal console")
    if importlib.util.find_spec("portal.console") is None:
        raise InvalidArgumentError(
            "the console and the MCP server are not installed: they come with the "
            f"portal-console package; install it with `pip install 'portal-console[{extra}]'`"
        )
    try:
        return importlib.import_module(f"portal.console.{name}")
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("mcp", "starlette", "uvicorn"):
            raise
        raise InvalidArgumentError(
            f"`{command}` needs portal-console's {extra} extra ({exc.name} is not installed): "
            f"install it with `pip install 'portal-console[{extra}]'`"
        ) from None


_CARRY_NOTED = CARRY_WARNINGS
_NOTED = {
    *_CARRY_NOTED,
    "carry-ok",
    "carry-unblocked",
    "notice",
    "notice-unusable",
    "pausing",
    "deferred",
    "pause-abandoned",
    "uploaded",
    "upload-failed",
    "overrun",
    "node-died",
    "reported-late",
    "portal-error",
    "node-error",
    "silent",
    "machine-check",
    "lost",
    "lost-machine",
}


class _Tail:
    """Copies what a growing file gained since the last call, bytes unchanged."""

    def __init__(self, path: Path, *, limit: int | None = None) -> None:
        self.path = path
        self.offset = 0
        self.limit = limit  # copy no further than this size (the rest is another's work)

    def copy_range(self, stream: TextIO, start: int, end: int | None) -> None:
        """Copy bytes ``start`` to ``end`` (None: to the file's end), and go on from there."""
        try:
            with self.path.open("rb") as f:
                f.seek(start)
                data = f.read(-1 if end is None else end - start)
        except FileNotFoundError:
            return
        self.offset = start + len(data)
        if data:
            stream.flush()
            stream.buffer.write(data)
            stream.buffer.flush()

    def copy(self, stream: TextIO) -> None:
        """What the file gained since the last copy, up to the limit."""
        if self.limit is not None and self.offset >= self.limit:
            return
        self.copy_range(stream, self.offset, self.limit)


def _replay_in_order(out: _Tail, err: _Tail, index: Path) -> None:
    """Copy what both files hold now (up to each one's limit), interleaved as it was written,
    and leave each tail at the end of what it copied."""
    sizes = []
    for tail in (out, err):
        try:
            size = tail.path.stat().st_size
        except FileNotFoundError:
            size = 0
        sizes.append(size if tail.limit is None else min(size, tail.limit))
    pieces = ordered_pieces(index, stdout_size=sizes[0], stderr_size=sizes[1])
    for stream, start, end in pieces:
        tail, target = (out, sys.stdout) if stream == "stdout" else (err, sys.stderr)
        tail.copy_range(target, start, end)


def _interactive() -> bool:
    """Whether someone at a terminal can answer a question (stdin and stderr both ttys)."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def _confirm(question: str) -> bool:
    """Ask on the terminal; only a yes is a yes."""
    print(f"portal: {question} [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = sys.stdin.readline()
    except (OSError, ValueError):
        return False
    return answer.strip().lower() in ("y", "yes")


def _placement(options: argparse.Namespace, *, state_gib: float | None = None) -> Placement:
    """What the placement flags ask (``--state-gib`` is ``portal run``'s alone)."""
    return Placement(
        on=options.on,
        gpu=options.gpu,
        no_spot=options.no_spot,
        spot_only=options.spot_only,
        memory_gib=options.memory,
        state_gib=state_gib,
    )


def _say(said: tuple[str, ...]) -> None:
    """What an action had to tell the person, in order."""
    for text in said:
        note(text)
