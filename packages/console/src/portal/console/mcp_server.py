"""``portal mcp``: an MCP server on stdio (the official MCP SDK) for agents.

Its tools answer with the very objects the CLI prints: ``status(job)`` is ``portal status
--json`` (``carry`` included), ``explain(job)`` the data behind ``portal explain``, ``logs(job)``
each attempt's output, ``jobs()`` what ``portal jobs`` lists. Read-only: an agent learns what a
job is doing and why; it suspends or resumes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from portal.control.views import JobViews
from portal.core.errors import PortalError

__all__ = ["build_server", "serve"]

#: Every tool reads the control plane and changes nothing, in Portal or beyond it: a client may
#: call them without asking its user.
_READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

_INSTRUCTIONS = (
    "Portal keeps long-running Python jobs alive on spot machines. jobs() lists the jobs; "
    "status(job) is a job's state, attempts, last checkpoint and its checkpoint check (carry: "
    "ok, problems, blocked, warning); explain(job) what happened at each notice; logs(job) "
    "its output. A job is named by its id (j-...) or its name."
)


def build_server(views: JobViews) -> MCPServer[Any]:
    """The MCP server over ``views``' control plane."""
    server: MCPServer[Any] = MCPServer("portal", instructions=_INSTRUCTIONS)

    @server.tool(annotations=_READ_ONLY)
    def jobs() -> list[dict[str, Any]]:
        """Every job, oldest first: id, name, state, number of attempts, script."""
        with _told():
            return views.jobs()

    @server.tool(annotations=_READ_ONLY)
    def status(job: str) -> dict[str, Any]:
        """A job's state, attempts, last checkpoint and checkpoint check (carry): the same
        object as `portal status JOB --json`."""
        with _told():
            return views.status(views.job(job))

    @server.tool(annotations=_READ_ONLY)
    def explain(job: str) -> dict[str, Any]:
        """Every notice the job got and what was decided at it, and the checkpoint check's
        decisions (warn or info, policy checkpoint): what `portal explain JOB` prints."""
        with _told():
            return views.explain(views.job(job))

    @server.tool(annotations=_READ_ONLY)
    def logs(job: str, max_bytes: int = 65536) -> list[dict[str, Any]]:
        """The job's output per attempt (stdout and stderr, the last max_bytes of each, cut
        between characters; a *_truncated flag says when earlier output was left out). A
        progress bar redrawn in place (tqdm's \\r frames) is given as its last state."""
        with _told():
            return views.logs(views.job(job), max_bytes=max_bytes, last_frames=True)

    return server


@contextmanager
def _told() -> Iterator[None]:
    """Portal's own errors reach the agent with their message and code (the way out is in the
    message); anything else stays a crash the SDK reports without its text."""
    try:
        yield
    except PortalError as exc:
        raise ToolError(f"{exc} [{exc.code}]") from exc


def serve(views: JobViews) -> int:
    """Serve on stdin/stdout until the client closes them."""
    build_server(views).run("stdio")
    return 0
