"""``portal mcp``: an MCP server on stdio (the official MCP SDK) for agents.

Its tools answer with the very objects the CLI prints: ``status(job)`` is ``portal status
--json`` (``carry`` included), ``explain(job)`` the data behind ``portal explain``, ``logs(job)``
each attempt's output, ``jobs()`` what ``portal jobs`` lists. Read-only by default: an agent
learns what a job is doing and why; it suspends or resumes nothing.

With the setting ``mcp.actions`` on (``PORTAL_MCP_ACTIONS=1``, or ``portal config set mcp.actions
true``), three more tools act: ``notice(job)``, ``resume(job)`` and ``cancel(job)``. Each is the
action the person's command takes (``portal notice JOB``, ``portal resume JOB --detach``, ``portal
cancel JOB``), called in this process through :class:`portal.jobs.Portal` (the same rules, the
same refusals), and answers with what it did and the command a person would type for it;
annotated as changing things (cancel as destructive), so a client asks its user first.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from portal.console.extras import refuse_without_extra
from portal.core.errors import InvalidArgumentError, PortalError
from portal.jobs import Portal

# The mcp extra's module: a missing one names the extra to install.
try:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations
except ImportError as exc:
    refuse_without_extra("mcp", exc)
    raise

__all__ = ["ACTIONS_SETTING", "build_server", "serve"]

#: Every tool reads the control plane and changes nothing, in Portal or beyond it: a client may
#: call them without asking its user.
_READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
#: Tools that change a job (a pause, a new attempt): a client should ask its user first.
#: They act on Portal's own jobs only (closed world): nothing beyond this control plane.
_ACTS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
#: Cancelling ends a job for good.
_ENDS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)
#: The most ``logs`` gives of one stream, whatever is asked: an agent's context is not a disk.
MAX_LOG_BYTES = 4 << 20
#: The setting that adds the acting tools.
ACTIONS_SETTING = "mcp.actions"

_INSTRUCTIONS = (
    "Portal keeps long-running Python jobs alive on spot machines. jobs() lists the jobs; "
    "status(job) is a job's state, attempts, last checkpoint and its checkpoint check (carry: "
    "ok, problems, blocked, warning); explain(job) what happened at each notice; logs(job) "
    "its output. A job is named by its id (j-...) or its name."
)


def build_server(portal: Portal, *, actions: bool | None = None) -> MCPServer[Any]:
    """The MCP server over ``portal``'s jobs; with ``actions`` (default: the setting
    ``mcp.actions``), its notice, resume and cancel tools too."""
    views = portal.views
    if actions is None:
        actions = bool(portal.settings.values.get(ACTIONS_SETTING, False))
    server: MCPServer[Any] = MCPServer(
        "portal",
        instructions=_INSTRUCTIONS + (_ACTING if actions else _READING),
        version=_version(),
    )

    @server.tool(title="List jobs", annotations=_READ_ONLY)
    def jobs() -> list[dict[str, Any]]:
        """Every job, oldest first, as `portal jobs --json` lists it: id, name, state, script,
        submitted/started/ended times and duration, attempts and recoveries, the machine, the
        last checkpoint (id, bytes, time), the checkpoint check's verdict (carry), and its
        source (portal, or the tool that ran it)."""
        with _told():
            return views.jobs()

    @server.tool(title="A job's status", annotations=_READ_ONLY)
    def status(job: str) -> dict[str, Any]:
        """A job's state, attempts, last checkpoint and checkpoint check (carry): the same
        object as `portal status JOB --json`."""
        with _told():
            return views.status(views.job(job))

    @server.tool(title="Explain a job's notices", annotations=_READ_ONLY)
    def explain(job: str) -> dict[str, Any]:
        """Every notice the job got and what was decided at it, and the checkpoint check's
        decisions (warn or info, policy checkpoint): what `portal explain JOB` prints."""
        with _told():
            return views.explain(views.job(job))

    @server.tool(title="A job's output", annotations=_READ_ONLY)
    def logs(job: str, max_bytes: int = 65536) -> list[dict[str, Any]]:
        """The job's output per attempt (stdout and stderr, the last max_bytes of each, 1 to
        4194304, cut between characters; a *_truncated flag says when earlier output was left
        out), as a terminal shows it: a progress bar redrawn in place (tqdm's \\r frames) as
        its last state, without colour codes."""
        with _told():
            if not 1 <= max_bytes <= MAX_LOG_BYTES:
                raise InvalidArgumentError(
                    f"max_bytes {max_bytes} is out of range: give 1 to {MAX_LOG_BYTES} (the "
                    "last max_bytes of each stream are given; 65536 unless told)"
                )
            return views.logs(views.job(job), max_bytes=max_bytes, as_shown=True)

    if actions:
        _add_actions(server, portal)
    return server


_READING = (
    " These tools only read; notice, resume and cancel are off (the setting mcp.actions turns "
    "them on)."
)
_ACTING = (
    " notice(job) asks a running job to pause at a safe point and suspend (as a spot notice "
    "does); resume(job) continues a suspended job from its last checkpoint; cancel(job) stops a "
    "job for good (its checkpoints are kept). Ask the user before each."
)


def _add_actions(server: MCPServer[Any], portal: Portal) -> None:
    """notice, resume and cancel: the person's own commands' actions, in process."""

    @server.tool(title="Deliver a notice", annotations=_ACTS)
    def notice(job: str, seconds: float | None = None) -> dict[str, Any]:
        """Deliver a preemption notice to the job's machine: it pauses at a safe point, is
        checkpointed and suspended (`portal notice JOB [--seconds S]`)."""
        with _told():
            sent = portal.notice(job, seconds)
        length = "" if seconds is None else f" --seconds {seconds:g}"
        return {
            "command": f"portal notice {job}{length}",
            "job": sent.job.id,
            "notice": sent.notice_id,
            "seconds": sent.seconds,
            "said": f"notice {sent.notice_id} delivered to job {sent.job.id}'s machine: it "
            f"goes in {sent.seconds:g} s",
        }

    @server.tool(title="Resume a job", annotations=_ACTS)
    def resume(job: str) -> dict[str, Any]:
        """Continue a suspended job from its last checkpoint, detached (`portal resume JOB
        --detach`): its new attempt, where it runs and the checkpoint it continues from."""
        with _told():
            started = portal.resume(job)
        return {
            "command": f"portal resume {job} --detach",
            "job": started.job.id,
            "attempt": started.attempt,
            "machine": started.machine,
            "checkpoint": started.checkpoint,
            "said": list(started.said),
        }

    @server.tool(title="Cancel a job", annotations=_ENDS)
    def cancel(job: str) -> dict[str, Any]:
        """Stop a job for good; its checkpoints are kept (`portal cancel JOB`)."""
        with _told():
            cancelled = portal.cancel(job)
        return {
            "command": f"portal cancel {job}",
            "job": cancelled.job.id,
            "state": str(cancelled.job.state),
            "said": cancelled.message,
        }


def _version() -> str:
    """The console's version, for the MCP handshake (clients show and log it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("portal-console")
    except PackageNotFoundError:
        return "0"


@contextmanager
def _told() -> Iterator[None]:
    """Portal's own errors reach the agent with their message and code (the way out is in the
    message); anything else stays a crash the SDK reports without its text."""
    try:
        yield
    except PortalError as exc:
        raise ToolError(f"{exc} [{exc.code}]") from exc


def serve(portal: Portal) -> int:
    """Serve on stdin/stdout until the client closes them."""
    build_server(portal).run("stdio")
    return 0
