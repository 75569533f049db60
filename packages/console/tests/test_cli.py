"""`portal console` and `portal mcp` refuse clearly: a port in use or out of range, the console
package missing, or any module of a command's extra."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

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


PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
#: The command each extra of portal-console is for (``testing`` is the tests' own).
EXTRA_COMMANDS = {"web": "console", "mcp": "mcp"}


def _extras_modules() -> dict[str, list[str]]:
    """Each command's extra in pyproject.toml, and the top-level modules its distributions
    install here (as Python imports them)."""
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    installs: dict[str, set[str]] = {}
    for module, distributions in packages_distributions().items():
        for distribution in distributions:
            installs.setdefault(_normal(distribution), set()).add(module)
    return {
        extra: sorted(
            module
            for requirement in extras[extra]
            for module in installs[_normal(re.split(r"[<>=!~;\[ ]", requirement)[0])]
        )
        for extra in EXTRA_COMMANDS
    }


def _normal(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


EXTRAS_MODULES = _extras_modules()


def test_the_console_knows_each_extra_s_modules_as_pyproject_installs_them() -> None:
    from portal.console.extras import EXTRA_MODULES

    assert {extra: sorted(modules) for extra, modules in EXTRA_MODULES.items()} == EXTRAS_MODULES


@pytest.mark.parametrize(
    ("extra", "hidden"),
    [(extra, module) for extra, modules in EXTRAS_MODULES.items() for module in modules],
)
def test_without_any_module_of_an_extra_the_real_cli_names_the_extra(
    portal: PortalCli, tmp_path: Path, extra: str, hidden: str
) -> None:
    # A sitecustomize on PYTHONPATH makes importing the one module fail, as if that part of the
    # extra were not installed.
    result = _run_with_site(
        portal, tmp_path, EXTRA_COMMANDS[extra], f"sys.modules[{hidden!r}] = None"
    )
    command = EXTRA_COMMANDS[extra]
    assert result.returncode in (64, 69), result.stderr
    assert "Traceback" not in result.stderr
    assert "a bug in Portal" not in result.stderr
    assert (
        f"`portal {command}` needs portal-console's {extra} extra ({hidden} is not installed): "
        f"install it with `pip install 'portal-console[{extra}]'`" in result.stderr
    )


def test_an_extra_s_module_too_old_to_use_is_named_with_the_way_to_update_it(
    portal: PortalCli, tmp_path: Path
) -> None:
    # Starlette is there, but its routing module lacks what the console imports from it.
    empty = "import types; sys.modules['starlette.routing'] = types.ModuleType('starlette.routing')"
    result = _run_with_site(portal, tmp_path, "console", empty)
    assert result.returncode == 64, result.stderr
    assert "Traceback" not in result.stderr
    assert (
        "`portal console` needs portal-console's web extra (starlette is installed, but not a "
        "version it can use: cannot import name '" in result.stderr
    )
    assert "from 'starlette.routing'" in result.stderr
    assert "update it with `pip install --upgrade 'portal-console[web]'`" in result.stderr


def _run_with_site(
    portal: PortalCli, tmp_path: Path, command: str, line: str
) -> subprocess.CompletedProcess[str]:
    """`python -m portal.cli COMMAND` as a user runs it, after a sitecustomize that runs
    ``line`` (with ``sys`` imported) at the interpreter's start."""
    (tmp_path / "sitecustomize.py").write_text(f"import sys\n{line}\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), portal.env.get("PYTHONPATH")]))
    flags = ["--port", "0"] if command == "console" else []
    try:
        return subprocess.run(
            portal.command(command, *flags),
            cwd=portal.workdir,
            env={**portal.env, "PYTHONPATH": path},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"`portal {command}` served after `{line}`: {exc.stderr!r}") from None


def test_console_help_says_the_token_keeps_other_local_users_out(portal: PortalCli) -> None:
    result = portal("console", "--help")
    assert result.returncode == 0, result.stderr
    words = " ".join(result.stdout.split())
    assert "Every user of this machine can reach 127.0.0.1: --auth keeps them out" in words
    assert "--auth" in words and "?token=" in words and "PORTAL_CONSOLE_AUTH=1" in words
