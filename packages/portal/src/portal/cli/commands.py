"""The ``portal`` commands themselves (:class:`Cli`), imported by :func:`portal.cli.main.main`
only once the command line has been parsed: ``portal --help``, ``portal completion`` and a usage
error never pay for the control plane, the node, capture or the policies.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from portal.cli import output, reports
from portal.cli.exits import EXIT_SUSPENDED, note
from portal.control.views import explain_lines
from portal.core.domain import Job, JobState
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
        return output.follow(self.portal, job, attempt)

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
        return reports.status(self.portal, options)

    def wait(self, options: argparse.Namespace) -> int:
        job = self.portal.wait(options.job, timeout=options.timeout)
        print(job.state)
        if job.state in (JobState.RUNNING, JobState.PAUSING):
            note(f"job {job.id} is still {job.state} after {options.timeout:g} s")
            return 1
        return 0

    def logs(self, options: argparse.Namespace) -> int:
        return output.logs(self.portal, options)

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
        return reports.checkpoints(self.portal, options)

    def jobs(self, options: argparse.Namespace) -> int:
        return reports.jobs(self.portal, options)

    def plugins(self, options: argparse.Namespace) -> int:
        return reports.plugins(self.portal, options)

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
