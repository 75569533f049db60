"""`portal console` and `portal mcp` refuse clearly: a port in use or out of range, and the
console package missing."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from conftest import PortalCli


def test_a_port_in_use_names_it_and_the_way_out(portal: PortalCli) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = portal("console", "--port", str(port))
    assert result.returncode == 64
    assert f"portal: cannot listen on 127.0.0.1:{port} (" in result.stderr
    assert "give another port with `portal console --port P` [INVALID_ARGUMENT]" in result.stderr


def test_a_port_out_of_range_is_refused(portal: PortalCli) -> None:
    result = portal("console", "--port", "70000")
    assert result.returncode == 64
    assert "--port 70000 is not a TCP port: give one from 1 to 65535" in result.stderr


def _run_hiding(portal: PortalCli, code: str, command: str) -> subprocess.CompletedProcess[str]:
    """``portal COMMAND`` run by ``code``, which hides a module first (as if not installed)."""
    return subprocess.run(
        [sys.executable, "-c", code, command],
        cwd=portal.workdir,
        env=portal.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_without_the_console_package_the_cli_says_what_to_install(portal: PortalCli) -> None:
    # The console hidden as if never installed; the rest of Portal as it is.
    code = (
        "import sys; sys.modules['portal.console'] = None\n"
        "from portal.cli.main import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )
    for command, extra in (("console", "web"), ("mcp", "mcp")):
        result = _run_hiding(portal, code, command)
        assert result.returncode == 64, result.stderr
        assert "come with the portal-console package" in result.stderr
        assert f"`pip install 'portal-console[{extra}]'`" in result.stderr


@pytest.mark.parametrize(
    ("command", "hidden", "extra"), [("console", "starlette", "web"), ("mcp", "mcp", "mcp")]
)
def test_without_a_command_s_extra_the_cli_names_the_extra(
    portal: PortalCli, command: str, hidden: str, extra: str
) -> None:
    # The console installed, but not its command's stack (as `pip install portal-console` is).
    code = (
        f"import sys; sys.modules[{hidden!r}] = None\n"
        "from portal.cli.main import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )
    result = _run_hiding(portal, code, command)
    assert result.returncode == 64, result.stderr
    assert f"`portal {command}` needs portal-console's {extra} extra" in result.stderr
    assert f"`pip install 'portal-console[{extra}]'`" in result.stderr
    assert "Traceback" not in result.stderr
