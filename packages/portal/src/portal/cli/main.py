"""``portal``: run, notice, status, wait, logs, explain, resume, jobs, checkpoints, cancel;
console, mcp.

Attached ``run``/``resume`` pass the program's stdout to stdout and its stderr to stderr,
unchanged; Portal's own notes go to stderr only, prefixed ``portal:``. Exit status: the
script's own; 75 when the job was suspended (resume it later); 64 for a usage error Portal
explains; 69 when Portal itself failed (its error code is printed); 70 for a bug in Portal. No
input prints a Python traceback: :func:`main` is the one error boundary (``PORTAL_DEBUG=1``
shows the traceback of a bug).

This module is the command line's parser and its one error boundary; the commands live in
:mod:`portal.cli.commands`, imported once the line is parsed (``portal --help`` stays fast).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from portal.cli.exits import EXIT_PORTAL, EXIT_SOFTWARE, EXIT_USAGE, note
from portal.core.errors import InvalidArgumentError, PortalError

if TYPE_CHECKING:
    from portal.cli.commands import Cli

__all__ = ["main"]

#: ``--checkpoint-every`` on run and resume (validated by the command: see portal.node.periodic).
_CHECKPOINT_EVERY_FLAG: tuple[tuple[str, ...], dict[str, Any]] = (
    ("--checkpoint-every",),
    {
        "metavar": "DURATION",
        "default": None,
        "help": "take a checkpoint every DURATION (30s, 10m, 1h30m, or seconds) while the job "
        "runs on: the script pauses only while its state is captured, the upload goes on "
        "beside it; if the machine is lost without notice, `portal resume` continues from "
        "the last one. `off` for none; `auto` (the default, setting checkpoint_every or env "
        "PORTAL_CHECKPOINT_EVERY): every 30 min on a spot machine, none elsewhere. The job keeps it for "
        "its resumes. e.g. --checkpoint-every 10m",
    },
)


def _memory_gib(text: str) -> float:
    """``--memory`` and ``--state-gib``: a positive number of GiB, a pebibyte at most (argparse
    reports the refusal as a usage error)."""
    from portal.core.settings import gib

    try:
        return gib(text)
    except ValueError as why:
        raise argparse.ArgumentTypeError(f"{why}, not {text!r}") from None


def _notice_seconds(text: str) -> float:
    """``notice --seconds``: read as every time in Portal is (``inf`` and ``1e300`` refused)."""
    from portal.core.settings import seconds

    try:
        return seconds(text)
    except ValueError as why:
        raise argparse.ArgumentTypeError(f"{why}, not {text!r}") from None


def _timeout_seconds(text: str) -> float:
    """``wait --timeout``: 0 (look once) up to a year and a day; no timeout is no flag."""
    from portal.core.settings import MAX_SECONDS, seconds

    try:
        return 0.0 if text.strip() in ("0", "0.0") else seconds(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds from 0 to {MAX_SECONDS:.0f} (366 days), not "
            f"{text!r}: leave --timeout out to wait until the job is no longer running"
        ) from None


def _placement_flags(command: argparse.ArgumentParser, *, new_job: bool) -> None:
    """The flags that place a job, the same on ``run`` and ``resume`` (a resume re-places it).

    ``--memory`` is the machine's memory, as people read it; the size of the job's state, what a
    spot notice must save, is measured by Portal, and only a new job's guess of it is a flag of
    its own (``--state-gib``, ``run`` only: a resume measures its checkpoint)."""
    command.add_argument(
        "--memory",
        type=_memory_gib,
        metavar="GIB",
        help="the machine memory the job needs, in GiB: a machine with less is never chosen "
        "(with a cloud's offers). e.g. --memory 16",
    )
    if new_job:
        command.add_argument(
            "--state-gib",
            type=_memory_gib,
            metavar="GIB",
            help="your guess of the job's state (what a checkpoint holds), in GiB, used until "
            "Portal measures it: a spot offer whose notice cannot save it is used with a "
            "warning. e.g. --state-gib 6",
        )
    command.add_argument(
        "--gpu", metavar="MODEL", help="machines with this GPU model only. e.g. --gpu L4"
    )
    command.add_argument(
        "--on",
        metavar="SPEC",
        help="an exact offer or a kind (with a cloud's offers). e.g. --on spot:c7i.large",
    )
    command.add_argument(
        "--no-spot", action="store_true", help="on-demand machines only. e.g. --no-spot"
    )
    command.add_argument(
        "--spot-only",
        action="store_true",
        help="spot machines only"
        + (", now and at every resume" if new_job else " (kept for later resumes)")
        + ". e.g. --spot-only",
    )
    command.add_argument(
        "--plan",
        action="store_true",
        help="show where it would run, with every offer's verdict; do nothing. e.g. --plan",
    )


def _job(command: argparse.ArgumentParser, *, optional: bool = False) -> None:
    """The JOB argument, named the same way by every command."""
    command.add_argument(
        "job",
        metavar="JOB",
        nargs="?" if optional else None,
        help="the job's id or the name given with --name (`portal jobs` lists them). e.g. train",
    )


def _json(command: argparse.ArgumentParser, what: str) -> None:
    """``--json``: the command's answer for scripts (its schema: docs/cli-json.md)."""
    command.add_argument(
        "--json",
        action="store_true",
        help=f"{what} as JSON, for scripts (schema: docs/cli-json.md). e.g. --json",
    )


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error's exit status Portal's (64, like every usage error) rather
    than argparse's 2, and its message in Portal's form."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"portal: {message} [INVALID_ARGUMENT]\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="portal",
        description="Keep long-running Python jobs alive across preemptions: run, suspend at a "
        "notice, resume.",
    )
    parser.add_argument("--version", action="version", version=f"portal {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="run SCRIPT as a job")
    run.add_argument(
        "--detach", action="store_true", help="print the job id and return. e.g. --detach"
    )
    run.add_argument(
        "--name", help="a unique name to refer to the job by (in place of its id). e.g. train"
    )
    _placement_flags(run, new_job=True)
    run.add_argument(*_CHECKPOINT_EVERY_FLAG[0], **_CHECKPOINT_EVERY_FLAG[1])
    run.add_argument(
        "--nproc-per-node",
        metavar="N",
        type=int,
        help="start N ranks of a torch.distributed script, as torchrun would (Portal is the "
        "launcher: leave torchrun out); they pause together and resume bit for bit. "
        "e.g. --nproc-per-node 2",
    )
    run.add_argument("script", metavar="SCRIPT", help="the Python file to run. e.g. train.py")
    run.add_argument(
        "args",
        metavar="ARGS",
        nargs=argparse.REMAINDER,
        help="the script's own arguments, as it reads them. e.g. --epochs 10",
    )
    resume = sub.add_parser("resume", help="continue a suspended job from its last checkpoint")
    _job(resume)
    resume.add_argument(
        "--detach", action="store_true", help="print the job id and return. e.g. --detach"
    )
    _placement_flags(resume, new_job=False)
    resume.add_argument(*_CHECKPOINT_EVERY_FLAG[0], **_CHECKPOINT_EVERY_FLAG[1])
    resume.add_argument(
        "--checkpoint",
        metavar="ID",
        help="resume from this complete checkpoint, not the last one (`portal checkpoints JOB` "
        "lists them). e.g. --checkpoint 20261205T140312.125Z-9f2c4a1b",
    )
    resume.add_argument(
        "--use-earlier",
        action="store_true",
        help="when the last checkpoint is damaged or gone, resume from the newest intact one "
        "(its work since then is done again). e.g. --use-earlier",
    )
    resume.add_argument(
        "--workdir",
        metavar="DIR",
        help="run the job in DIR from now on (its files come with the checkpoint; made if "
        "missing): for a job whose directory was moved or deleted. e.g. --workdir ~/train2",
    )
    notice = sub.add_parser("notice", help="deliver a preemption notice to the job's machine")
    _job(notice)
    notice.add_argument(
        "--seconds",
        type=_notice_seconds,
        metavar="S",
        help="how long before the machine goes (default 120, setting notice_default_s). "
        "e.g. --seconds 30",
    )
    status = sub.add_parser(
        "status", help="a job's state, attempts and last checkpoint (no JOB: every job's row)"
    )
    _job(status, optional=True)
    _json(status, "the job's status (no JOB: every job's row)")
    wait = sub.add_parser("wait", help="block until the job is no longer running or pausing")
    _job(wait)
    wait.add_argument(
        "--timeout",
        type=_timeout_seconds,
        metavar="S",
        help="give up after S seconds (exit 1, the job goes on). e.g. --timeout 60",
    )
    logs = sub.add_parser("logs", help="the job's output across all attempts")
    _job(logs)
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="follow the job across its attempts until it ends (done, failed, lost or "
        "cancelled); while it is suspended, wait for its resume. e.g. `portal logs -f train`",
    )
    logs.add_argument(
        "--stream",
        choices=("both", "stdout", "stderr"),
        default="both",
        help="which output: both (the default: interleaved as they were written, stdout to "
        "stdout and stderr to stderr), or one of them. e.g. `portal logs train --stream stderr`",
    )
    explain = sub.add_parser("explain", help="every notice and what was decided at it")
    _job(explain)
    _json(explain, "the notices with their decisions, the checkpoint check's and placement's")
    jobs = sub.add_parser("jobs", help="a table of jobs")
    _json(jobs, "every job's row")
    plugins = sub.add_parser(
        "plugins",
        help="each plugin loaded (distribution, version, hooks), what it registers, and failures",
    )
    _json(plugins, "what each plugin registers, and the failures")
    checkpoints = sub.add_parser(
        "checkpoints", help="a job's checkpoints: complete, incomplete, damaged or missing, and why"
    )
    _job(checkpoints)
    checkpoints.add_argument(
        "--verify",
        action="store_true",
        help="read and check every chunk (slow: all the bytes). e.g. --verify",
    )
    _json(checkpoints, "the job's checkpoints")
    move = sub.add_parser("move", help="pause a running job and resume it on another machine")
    _job(move)
    _placement_flags(move, new_job=False)
    cancel = sub.add_parser("cancel", help="stop a job for good (its checkpoints are kept)")
    _job(cancel)
    console = sub.add_parser(
        "console",
        help="a web console of the jobs, on 127.0.0.1",
        description="A read-only web console of this PORTAL_HOME's jobs (or its control "
        "plane's). It listens on 127.0.0.1 only: from another machine, reach it through an SSH "
        "tunnel (ssh -L 8470:127.0.0.1:8470 HOST). Every user of this machine can reach "
        "127.0.0.1: --auth keeps them out with a token.",
    )
    console.add_argument(
        "--port",
        type=int,
        default=8470,
        metavar="P",
        help="the port on 127.0.0.1 (default 8470; 0 picks a free one). e.g. --port 9000",
    )
    console.add_argument(
        "--auth",
        action="store_true",
        default=None,
        help="ask every request for a token, new at each start: open the address printed "
        "(http://127.0.0.1:8470/?token=...) or send `Authorization: Bearer TOKEN`; keeps out "
        "the other users of this machine (also PORTAL_CONSOLE_AUTH=1). e.g. --auth",
    )
    sub.add_parser("mcp", help="an MCP server on stdio: status, jobs, explain and logs")
    config = sub.add_parser("config", help="the settings: each value and where it comes from")
    actions = config.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser("show", help="every setting's value and the layer it comes from")
    _json(show, "every setting's value and origin")
    setting = actions.add_parser("set", help="write KEY = VALUE to PORTAL_HOME/config.toml")
    setting.add_argument(
        "key", metavar="KEY", help="a setting's name (`portal config show`). e.g. cloud"
    )
    setting.add_argument("value", metavar="VALUE", help="its value. e.g. simulated")
    setting.add_argument(
        "--project",
        action="store_true",
        help="write it to ./portal.toml (this project) instead. e.g. --project",
    )
    # Parsed by portal.server itself (see _server_main); listed here for `portal --help`.
    sub.add_parser("server", help="the control plane as an HTTP service; token create/list/revoke")
    completion = sub.add_parser(
        "completion",
        help='print a shell completion script: eval "$(portal completion bash)" in ~/.bashrc',
    )
    completion.add_argument("shell", choices=_SHELLS, help="bash, zsh or tcsh. e.g. bash")
    return parser


#: The shells shtab writes completion scripts for.
_SHELLS = ("bash", "zsh", "tcsh")


def _completion(shell: str) -> int:
    """``portal completion SHELL``: the script that completes Portal's commands and flags in
    ``shell``, written by shtab from this very parser (so it never lags behind a new flag)."""
    import shtab

    print(shtab.complete(_parser(), shell=shell))
    return 0


def _server_main(argv: list[str]) -> int:
    """``portal server ...``: the portal-server distribution's own command line, imported only
    when it runs, so ``portal`` works without its web stack (and opens no control plane here)."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("portal.server") is None:
        exc = InvalidArgumentError(
            "the control-plane server is not installed: it comes with the portal-server "
            "package; install it with `pip install portal-server`"
        )
        note(f"{exc} [{exc.code}]")
        return EXIT_USAGE
    return int(importlib.import_module("portal.server.cli").main(argv))


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, read; a flag the command does not take is refused with that command's
    usage (a misspelt flag of ``portal jobs`` shows that command's usage, not ``portal``'s), so the
    way out is on the screen."""
    options, extras = parser.parse_known_args(argv)
    if extras:
        _command_parser(parser, options).error(f"unrecognized arguments: {' '.join(extras)}")
    return options


def _command_parser(
    parser: argparse.ArgumentParser, options: argparse.Namespace
) -> argparse.ArgumentParser:
    """The (sub)command's own parser that read ``options``: ``portal config set`` is two down."""
    while True:
        commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(options, commands[0].dest, None) if commands else None
        if not commands or chosen not in commands[0].choices:
            return parser
        parser = commands[0].choices[chosen]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("portal-spot")
    except PackageNotFoundError:
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["server"]:
        return _server_main(args[1:])
    options = _parse(_parser(), argv)
    cli: Cli | None = None
    try:
        if options.command == "config":  # the settings alone: no control plane is opened
            from portal.cli.config import config_command

            return config_command(options)
        if options.command == "completion":  # nothing but the parser
            return _completion(options.shell)
        from portal.cli.commands import Cli

        cli = Cli()
        return int(getattr(cli, options.command)(options))
    except InvalidArgumentError as exc:
        note(f"{exc} [{exc.code}]")
        return EXIT_USAGE
    except PortalError as exc:
        note(f"{exc} [{exc.code}]")
        return EXIT_PORTAL
    except KeyboardInterrupt:
        note("interrupted; the job goes on (see `portal jobs`)")
        return 130
    except BrokenPipeError:
        # The reader went away (`portal logs JOB | head`): what it read is what it wanted.
        # Python would complain at exit flushing stdout again; point stdout at nothing first.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except UnicodeError as exc:
        what = getattr(exc, "object", b"")[:60]
        note(
            f"a name or file is not valid UTF-8 text ({getattr(exc, 'reason', exc)}, in "
            f"{what!r}): Portal keeps names as text; rename it [INVALID_ARGUMENT]"
        )
        return EXIT_USAGE
    except ValueError as exc:  # a value the domain refuses, with its own words
        note(f"{exc} [INVALID_ARGUMENT]")
        return EXIT_USAGE
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        note(
            f"cannot use{where}: {exc.strerror or exc}. Check that the path exists and this "
            "user may use it (PORTAL_HOME, the job's directory, the store) [OS_ERROR]"
        )
        return EXIT_PORTAL
    except Exception as exc:
        if os.environ.get("PORTAL_DEBUG"):
            raise
        note(
            f"internal error ({type(exc).__name__}: {exc}): this is a bug in Portal, not in "
            "your job; run the command again with PORTAL_DEBUG=1 to see where, and report it "
            "[INTERNAL]"
        )
        return EXIT_SOFTWARE
    finally:
        if cli is not None:
            cli.close()


if __name__ == "__main__":
    raise SystemExit(main())
