"""Every command a message tells the user to run exists, with the flags it names (issue 19: a
message once named `portal storage list`, which no Portal ever had). The source of every
installed package is read as the interpreter reads it (adjacent literals joined, f-strings with
their fixed parts), and each backticked ``portal ...`` is checked against the CLI's own parser."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

from portal.cli.main import _parser

PACKAGES = Path(__file__).resolve().parents[2]
_COMMAND = re.compile(r"`portal ([^`]*)`")


def _texts(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            found.append(
                "".join(
                    part.value if isinstance(part, ast.Constant) else "X" for part in node.values
                )
            )
    return found


def _commands() -> list[tuple[str, str]]:
    """``(where, command line after 'portal ')`` of every backticked command in the sources."""
    seen = []
    for path in sorted(PACKAGES.glob("*/src/**/*.py")):
        for text in _texts(path):
            for match in _COMMAND.finditer(text):
                seen.append((str(path.relative_to(PACKAGES)), match.group(1)))
    return seen


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {opt for action in parser._actions for opt in action.option_strings}


def test_every_command_a_message_names_exists_with_its_flags() -> None:
    commands = _commands()
    assert len(commands) > 50, "the scan found too few commands to be looking in the right place"
    top = _parser()
    subcommands = _subparsers(top)
    wrong = []
    for where, line in commands:
        words = line.split()
        if not words or words[0].startswith("-"):
            if words and words[0] not in _flags(top):
                wrong.append(f"{where}: `portal {line}`: no option {words[0]}")
            continue
        if words[0] in ("X", "server"):  # a command filled in at run time; portal-server's own
            continue
        for name in words[0].split("|"):  # `portal resume|move ...`: each of them
            parser = subcommands.get(name)
            if parser is None:
                wrong.append(f"{where}: `portal {line}`: no command {name!r}")
                continue
            nested = _subparsers(parser)
            if nested and len(words) > 1 and not words[1].startswith("-"):
                if words[1] not in nested and words[1].upper() != words[1]:
                    wrong.append(f"{where}: `portal {line}`: no {name} {words[1]!r}")
                parser = nested.get(words[1], parser)
            for word in words[1:]:
                flag = word.strip("[]").split("=", 1)[0].rstrip(",;.)")
                if flag.startswith("--") and flag not in _flags(parser):
                    wrong.append(f"{where}: `portal {line}`: {name} has no option {flag}")
    assert not wrong, "\n".join(wrong)


#: "portal WORD" in prose that is not a command ("upgrade portal on every machine").
_PROSE = {"on"}


def test_a_command_named_without_backticks_exists_too() -> None:
    """``(portal storage list shows them)`` was such a one: plain text, so a scan for
    backticks alone would not have found it."""
    subcommands = set(_subparsers(_parser()))
    wrong = []
    for path in sorted(PACKAGES.glob("*/src/**/*.py")):
        for text in _texts(path):
            for match in re.finditer(r"(?<![`\w.-])portal ([a-z][a-z-]*)", text):
                word = match.group(1)
                if word not in subcommands and word not in _PROSE:
                    wrong.append(f"{path.relative_to(PACKAGES)}: ...{text[match.start() :][:60]}")
    assert not wrong, "\n".join(wrong)
