"""`portal server --help` shows, for every flag and argument, what it takes with an example."""

from __future__ import annotations


def test_every_server_flag_says_what_it_takes_with_an_example() -> None:
    import argparse

    from portal.server.cli import _parser

    without: list[str] = []

    def walk(parser: argparse.ArgumentParser, words: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, [*words, name])
            elif action.dest != "help" and "e.g. " not in (action.help or ""):
                without.append(" ".join([*words, *action.option_strings[:1], action.dest]))

    walk(_parser(), ["portal server"])
    assert without == []
