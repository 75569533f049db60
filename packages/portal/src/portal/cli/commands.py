"""The ``portal`` commands themselves (:class:`Cli`), imported by :func:`portal.cli.main.main`
only once the command line has been parsed: ``portal --help``, ``portal completion`` and a usage
error never pay for the control plane, the node, capture or the policies.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from portal.cli.exits import EXIT_PORTAL, EXIT_SUSPENDED, note
from portal.cli.placement import Placement, local_only
from portal.cli.progress import ProgressLine
from portal.cli.ranks import nproc_option
from portal.cli.resume_point import resume_point
from portal.control import silence, wording
from portal.control.checkpoints import job_checkpoints
from portal.control.lineage import output_cuts, superseded_attempts
from portal.control.output_order import ordered_pieces
from portal.control.plane import ControlPlane
from portal.control.store import JobStateConflictError
from portal.control.views import CARRY_WARNINGS, JobViews, explain_lines, job_row_words
from portal.core import units
from portal.core.domain import AttemptState, Job, JobState
from portal.core.errors import InvalidArgumentError
from portal.node.launch import NodeStartError, launch_node, resume_workdir
from portal.node.periodic import checkpoint_every_option, note_periodic_resume
from portal.node.spool import store_kept
from portal.providers.local import deliver_notice

__all__ = ["Cli"]


class Cli:
    def __init__(self) -> None:
        self.plane = ControlPlane()
        self.views = JobViews(self.plane)  # what status, explain (and the console) show

    def close(self) -> None:
        """Close the control plane's connection (a command run in process, as tests and
        embedders do, leaves no database open behind it)."""
        with contextlib.suppress(Exception):
            self.plane.store.close()

    @property
    def store(self) -> Any:
        return self.views.store

    def job(self, ref: str) -> Job:
        return self.views.job(ref)

    # --- starting attempts ----------------------------------------------------------------------

    def _spawn_node(self, job: Job, *, resume_from: str | None) -> int:
        return launch_node(self.plane, job, resume_from=resume_from)

    def run(self, options: argparse.Namespace) -> int:
        script = Path(options.script)
        if script.is_dir():
            inside = sorted(p.name for p in script.glob("*.py"))[:3]
            raise InvalidArgumentError(
                f"script {options.script!r} is a folder, not a Python file: give the file to run"
                + (f" (it holds {', '.join(inside)})" if inside else "")
                + ", e.g. `portal run train.py`",
                details={"script": options.script},
            )
        if not script.is_file():
            raise InvalidArgumentError(
                f"script {options.script!r} not found in {Path.cwd()}: give the path of a Python "
                "file, e.g. `portal run train.py`"
            )
        checkpoint_every_option(options.checkpoint_every)
        if options.no_spot and options.spot_only:
            raise InvalidArgumentError(
                "--no-spot and --spot-only ask for opposite machines: give one of them"
            )
        placement = Placement(self)
        placing = (
            options.memory,
            options.state_gib,
            options.gpu,
            options.on,
            options.no_spot,
            options.spot_only,
            options.plan,
        )
        if placement.enabled and any(placing):
            # Placed on the cloud's offers when asked to be; otherwise it starts here, and the
            # offers count from its first resume or move.
            return placement.run(options, str(Path.cwd().resolve()))
        for flag, given in (
            (f"--on {options.on}", options.on),
            (f"--gpu {options.gpu}", options.gpu),
            ("--spot-only", options.spot_only),
        ):
            if given:
                raise local_only(flag, "", script=options.script)
        if options.plan:
            print("D8 choice: this machine (local, on-demand); nothing else is installed")
            return 0
        job = self.plane.create_job(
            script=options.script,
            args=options.args,
            workdir=Path.cwd(),
            name=options.name,
            memory_gib=options.memory,
            state_gib=options.state_gib,
            nproc_per_node=nproc_option(options.nproc_per_node),
        )
        try:
            self.store.create_job_key(job.id)
            attempt = self._spawn_node(job, resume_from=None)
        except BaseException as exc:  # nothing runs: the job must not look as if it did
            self.plane.set_state(job.id, JobState.FAILED)
            self.plane.record(
                job.id, "start-failed", f"job {job.id} did not start: {type(exc).__name__}: {exc}"
            )
            raise
        if options.detach:
            print(job.id, flush=True)
            return 0
        note(f"job {job.id} started" + (f" ({job.name})" if job.name else ""))
        return self.follow(job, attempt)

    def resume(self, options: argparse.Namespace) -> int:
        if options.no_spot and options.spot_only:
            raise InvalidArgumentError(
                "--no-spot and --spot-only ask for opposite machines: give one of them"
            )
        job = self.job(options.job)
        placement = Placement(self)
        if not placement.enabled:
            for flag, given in (
                (f"--gpu {options.gpu}", options.gpu),
                (f"--on {options.on}", options.on),
                (f"--memory {options.memory:g}" if options.memory else "", options.memory),
                ("--spot-only", options.spot_only),
            ):
                if given:
                    raise local_only(flag, options.job)
        if options.workdir is not None and placement.enabled:
            raise InvalidArgumentError(
                f"--workdir {options.workdir}: a simulated machine runs the job in a directory of "
                "its own; --workdir is for a resume on this machine"
            )
        checkpoint_every_option(options.checkpoint_every)
        # A lost job (its machine gone without notice) resumes too, from its last complete
        # checkpoint: a periodic one, typically.
        resumable = [JobState.SUSPENDED, JobState.LOST]
        ended = (JobState.FAILED, JobState.CANCELLED)
        if job.state in ended and options.checkpoint:
            resumable.append(job.state)  # a checkpoint the user names: their choice, said below
        elif job.state not in resumable:
            recorded = self.views.recorded_checkpoint(job)
            raise _not_resumable(
                job.id, job.state, options.job, checkpointed=recorded is not None, job=job
            )
        stored = store_kept(self.plane, self.store, job)  # a paused attempt's unstored checkpoint
        if stored is not None:
            note(f"stored checkpoint {stored.checkpoint_id}, kept locally when its upload failed")
        ref = resume_point(
            self.plane,
            self.store,
            job,
            options.checkpoint,
            options.job,
            use_earlier=options.use_earlier,
            confirm=_confirm if _interactive() else None,
        )
        if job.state in ended:
            note(
                f"job {job.id} is {job.state}; resuming it from checkpoint {ref.checkpoint_id}, "
                "as you asked"
            )
        if placement.enabled:
            return placement.resume(job, ref, options)
        if options.plan:
            for line in self._plan_lines(job, ref, no_spot=options.no_spot):
                print(line)
            return 0
        resume_workdir(self.plane, job, options.workdir, options.job)  # refused: nothing changed
        try:
            self.plane.set_state(job.id, JobState.RUNNING, expect=resumable)
        except JobStateConflictError:  # another resume (or a node) changed it meanwhile
            raise _not_resumable(job.id, self.plane.job(job.id).state, options.job) from None
        note_periodic_resume(self.plane, self.store, job, ref)
        self.plane.record(
            job.id,
            "resuming",
            f"resuming from checkpoint {ref.checkpoint_id} on this machine (local, on-demand)",
            checkpoint=ref.checkpoint_id,
        )
        try:
            attempt = self._spawn_node(job, resume_from=ref.checkpoint_id)
        except NodeStartError as exc:
            self.plane.set_state(job.id, job.state, expect=[JobState.RUNNING])
            self.plane.record(
                job.id, "resume-failed", f"{exc}; the job stays {job.state}", error=exc.to_dict()
            )
            raise
        if options.detach:
            print(job.id, flush=True)
            return 0
        note(f"job {job.id} resuming from checkpoint {ref.checkpoint_id}")
        return self.follow(job, attempt)

    def _plan_lines(self, job: Job, ref: Any, *, no_spot: bool) -> list[str]:
        return [
            f"D1 resume job {job.id}" + (" --no-spot" if no_spot else ""),
            f"D2 state: {units.size(ref.size_bytes)}, its checkpoint as stored "
            f"({ref.checkpoint_id})",
            "D3 offers considered: this machine (local, on-demand); no cloud offers installed",
            "D8 would resume on this machine (local, on-demand: no notice to fit)",
        ]

    def move(self, options: argparse.Namespace) -> int:
        return Placement(self).move(self.job(options.job), options)

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
        job = self.job(options.job)
        if job.state not in (JobState.RUNNING, JobState.PAUSING):
            raise InvalidArgumentError(
                f"job {job.id} is {job.state}: a notice goes to a running job's machine"
            )
        # A notice asks for a suspend: refused while the node is silent, in the rules' words.
        silence.refuse_while_silent(self.plane, job, f"suspending job {job.id}")
        seconds = (
            options.seconds if options.seconds is not None else self.plane.settings.notice_default_s
        )
        notice = deliver_notice(self.plane.paths(job.id).notices, seconds=seconds)
        note(f"notice {notice.id} delivered to job {job.id}'s machine: it goes in {seconds:g} s")
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
        end = None if options.timeout is None else time.monotonic() + options.timeout
        while True:
            job = self.job(options.job)
            if job.state not in (JobState.RUNNING, JobState.PAUSING):
                print(job.state)
                return 0
            if end is not None and time.monotonic() >= end:
                print(job.state)
                note(f"job {job.id} is still {job.state} after {options.timeout:g} s")
                return 1
            time.sleep(0.1)

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
        views = job_checkpoints(self.plane, self.store, job.id, verify=options.verify)
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
        job = self.job(options.job)
        if job.state.is_final:
            note(f"job {job.id} is already {job.state}")
            return 0
        attempts = self.plane.store.attempts(job.id)
        if attempts and attempts[-1].state is AttemptState.RUNNING:
            pid_file = self.plane.paths(job.id).attempt(attempts[-1].number) / "node.pid"
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)  # its job dies with it
            self.plane.store.end_attempt(
                job.id,
                attempts[-1].number,
                state=AttemptState.FAILED,
                at=self.plane.clock.now(),
                exit_code=None,
            )
        self.plane.set_state(job.id, JobState.CANCELLED)
        kept = self.views.recorded_checkpoint(job) is not None
        said = "its checkpoints are kept" if kept else "it had no checkpoint"
        self.plane.record(job.id, "cancelled", f"cancelled by the user; {said}")
        note(f"job {job.id} cancelled ({said})")
        return 0

    # --- the console and the MCP server (the portal-console distribution) -----------------------

    def console(self, options: argparse.Namespace) -> int:
        return int(
            _console_part("web").serve(
                self.views, port=options.port, announce=note, auth=options.auth
            )
        )

    def mcp(self, options: argparse.Namespace) -> int:
        return int(_console_part("mcp_server").serve(self.views))


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


def _not_resumable(
    job_id: str, state: JobState, ref: str, *, checkpointed: bool = True, job: Job | None = None
) -> InvalidArgumentError:
    """Why a job in ``state`` does not resume: the same words whether the CLI saw the state
    itself or lost a race to another resume that changed it first. A failed or cancelled job
    resumes from a checkpoint the user names, if it has one (``checkpointed``); else the way on
    is to run its script again."""
    also = ""
    if state in (JobState.FAILED, JobState.CANCELLED) and checkpointed:
        also = (
            f"; a {state} job resumes from a checkpoint you name: `portal resume {ref} "
            "--checkpoint ID` (`portal status` lists them)"
        )
    elif state in (JobState.FAILED, JobState.CANCELLED) and job is not None:
        again = "portal run " + shlex.join([job.script, *job.args])
        also = f"; it has no checkpoint to resume from: run it again with `{again}`"
    return InvalidArgumentError(
        f"job {job_id} is {state}, not suspended: only a suspended job resumes "
        f"(`portal status` shows its state){also}"
    )
