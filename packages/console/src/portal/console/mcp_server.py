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

from portal.control.views import JobViews
from portal.core.errors import PortalError

__all__ = ["build_server", "serve"]

_INSTRUCTIONS = (
    "Portal keeps long-running Python jobs alive on spot machines. jobs() lists the jobs; "
    "status(job) is a job's state, attempts, last checkpoint and its checkpoint check (carry: "
    "ok, problems, blocked, warning); explain(job) what happened at each notice; logs(job) "
    "its output. A job is named by its id (j-...) or its name."
)


def build_server(views: JobViews) -> MCPServer[Any]:
    """The MCP server over ``views``' control plane."""
    server: MCPServer[Any] = MCPServer("portal", instructions=_INSTRUCTIONS)

    @server.tool()
    def jobs() -> list[dict[str, Any]]:
        """Every job, oldest first: id, name, state, number of attempts, script."""
        with _told():
            return views.jobs()

    @server.tool()
    def status(job: str) -> dict[str, Any]:
        """A job's state, attempts, last checkpoint and checkpoint check (carry): the same
        object as `portal status JOB --json`."""
        with _told():
            return views.status(views.job(job))

    @server.tool()
    def explain(job: str) -> dict[str, Any]:
        """Every notice the job got and what was decided at it, and the checkpoint check's
        decisions (warn or info, policy checkpoint): what `portal explain JOB` prints."""
        with _told():
            return views.explain(views.job(job))

    @server.tool()
    def logs(job: str, max_bytes: int = 65536) -> list[dict[str, Any]]:
        """The job's output per attempt (stdout and stderr, the last max_bytes of each; a
        *_truncated flag says when earlier output was left out)."""
        with _told():
            return views.logs(views.job(job), max_bytes=max_bytes)

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
