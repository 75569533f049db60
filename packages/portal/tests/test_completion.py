"""``portal completion SHELL``: a completion script written from the CLI's own parser, tried in a
real bash: the words it offers are Portal's commands, subcommands and flags."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import PortalCli


def _complete(script: str, *words: str) -> list[str]:
    """What bash offers for the last of ``words`` with ``script`` sourced."""
    line = " ".join(words)
    program = (
        f"source {script}\n"
        f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; "
        f"COMP_POINT={len(line)}\n"
        "_shtab_portal\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return sorted(done.stdout.split())


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not on this machine")
def test_bash_completes_commands_subcommands_and_flags(portal: PortalCli) -> None:
    written = portal("completion", "bash")
    assert written.returncode == 0, written.stderr
    script = portal.workdir / "portal.bash"
    script.write_text(written.stdout)
    assert _complete(str(script), "portal", "ru") == ["run"]
    assert _complete(str(script), "portal", "co") == ["completion", "config", "console"]
    assert _complete(str(script), "portal", "config", "s") == ["set", "show"]
    assert "--detach" in _complete(str(script), "portal", "run", "--d")


def test_zsh_and_an_unknown_shell(portal: PortalCli) -> None:
    zsh = portal("completion", "zsh")
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef portal")
    fish = portal("completion", "fish")
    assert fish.returncode == 64 and "invalid choice: 'fish'" in fish.stderr
    assert "Traceback" not in fish.stderr


def test_every_flag_and_argument_says_what_it_takes_with_an_example() -> None:
    """``portal CMD --help`` is where people look first: each option shows a real use."""
    import argparse

    from portal.cli.main import _parser

    without: list[str] = []

    def walk(parser: argparse.ArgumentParser, words: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, [*words, name])
            elif action.dest not in ("help", "version") and "e.g. " not in (action.help or ""):
                without.append(
                    " ".join(
                        [*words, action.option_strings[0] if action.option_strings else action.dest]
                    )
                )

    walk(_parser(), ["portal"])
    assert without == []
