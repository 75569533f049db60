"""Portal's local web console (``portal console``) and MCP server (``portal mcp``).

Both are readers of one control plane (one ``PORTAL_HOME``) through
:class:`portal.control.views.JobViews`, the same views ``portal status --json`` and
``portal explain`` print, so a browser, an agent and the CLI always agree about a job.
"""
