"""The ``bladekit`` command: ``bladekit run FILE::FUNCTION [ARGS...]`` and ``bladekit preempt``.

``bladekit run`` is ``modal run`` for the local runner: it imports FILE, finds the app function
(or ``Class.method``), runs it in a container inside ``with app.run():`` (so Ctrl-C or an error
stops what it started), prints the result on stdout and exits 0. What goes wrong is said in one
paragraph on stderr (what, why, the way out), never as a traceback:

====  ==================================================================================
code  meaning
====  ==================================================================================
0     the function returned (its result is on stdout: a string as is, else JSON when it
      can be, else its repr; nothing for None)
1     the function raised (its traceback is saved in the run folder, named in the message)
2     the command was wrong: file, FILE::FUNCTION, or arguments
3     the run itself failed: preempted more times than max_interruptions allows, container crash
130   interrupted (Ctrl-C); the run was stopped
====  ==================================================================================

Starting is kept fast: nothing of bladekit beyond this module is imported before the arguments
are read, and ``--help`` imports nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["main"]

USAGE_ERROR = 2
FUNCTION_FAILED = 1
RUN_FAILED = 3
INTERRUPTED = 130


class _Exit(BaseException):
    """Ends the command with ``code``; a BaseException so no ``except Exception`` swallows it."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _fail(code: int, message: str) -> NoReturn:
    raise _Exit(code, message)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bladekit",
        description="Run bladekit functions on interruptible capacity (locally: subprocess "
        "containers that checkpoint and resume).",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run an app function: bladekit run FILE::FUNCTION [ARGS...]",
        description="Import FILE, run FUNCTION (or Class.method) in a container, print its "
        "result. Arguments follow the function's signature: words fill positional parameters "
        "in order; --name VALUE sets one by name; --flag/--no-flag for a bool. "
        "`bladekit run FILE::FUNCTION --help` lists them.",
        add_help=False,
    )
    run.add_argument("target", metavar="FILE::FUNCTION", nargs="?")
    run.add_argument("words", nargs=argparse.REMAINDER, metavar="ARGS")
    preempt = commands.add_parser(
        "preempt",
        help="deliver a preemption notice to a running run (tests, demos)",
        description="Deliver a preemption notice to run RUN_ID's container, as a spot VM's "
        "provider would: its on_preempt callback checkpoints and the call resumes on a new "
        "attempt.",
    )
    preempt.add_argument("run_id", metavar="RUN_ID")
    preempt.add_argument(
        "--seconds", type=float, default=30.0, help="grace window in seconds (default 30)"
    )
    return parser


def _show(value: Any) -> str | None:
    """How a result is printed: a string as is, else JSON when possible, else its repr."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _first_paragraph(text: str) -> str:
    return text.strip().split("\n\n")[0].split("\nIts last output:")[0].strip()


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else f"{text}."


def _run(target_text: str | None, words: list[str]) -> int:
    if not target_text or target_text in ("-h", "--help"):
        sys.stdout.write(
            "usage: bladekit run FILE::FUNCTION [ARGS...]\n\n"
            "Run an app function (or FILE::Class.method) in a container and print its result.\n"
            "FILE alone runs its local entrypoint (@app.local_entrypoint(), here, as `modal run`\n"
            "does), else its only function. `bladekit run FILE::FUNCTION --help` lists the\n"
            "function's parameters.\n"
        )
        return 0 if target_text else USAGE_ERROR
    file, sep, name = target_text.partition("::")
    from bladekit import cli_args, cli_target
    from portal.core.errors import InvalidArgumentError

    try:
        module = cli_target.load_module(file)
        target = cli_target.find(module, file, name if sep else None)
        fn = target.obj.raw if target.method is None else getattr(target.obj.raw, target.method)
        if "--help" in words or "-h" in words:
            print(f"usage: bladekit run {target.label} [ARGS...]\n\nparameters:")
            print(cli_args.describe(fn, skip_self=target.method is not None))
            return 0
        args, kwargs = cli_args.parse(
            fn, words, where=target.label, skip_self=target.method is not None
        )
    except InvalidArgumentError as exc:
        _fail(USAGE_ERROR, exc.message)
    return _call(target, args, kwargs)


def _call(target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    from bladekit.app import Cls, LocalEntrypoint, run_of
    from bladekit.errors import PortalError, RemoteError, RunError

    app = target.obj.app
    run = None
    here = isinstance(target.obj, LocalEntrypoint)
    try:
        with app.run():
            if here:  # Modal's local entrypoint: runs in this process; its calls start runs
                print(
                    f"bladekit: running {target.label} here (each call it makes to an app "
                    "function starts a run of its own)",
                    file=sys.stderr,
                    flush=True,
                )
                value = target.obj(*args, **kwargs)
            elif isinstance(target.obj, Cls):
                try:
                    instance = target.obj()
                except Exception as exc:  # pragma: no cover - Cls() only stores the arguments
                    _fail(USAGE_ERROR, f"{target.label}: could not make the instance: {exc}")
                run = run_of(instance)
            else:
                run = target.obj.new_run()
            if run is not None:
                print(
                    f"bladekit: running {target.label} as run {run.run_id} (files: {run.dir})",
                    file=sys.stderr,
                    flush=True,
                )
                try:
                    value = run.call(target.method, args, kwargs)
                finally:
                    run.close()
    except KeyboardInterrupt:
        what = (
            f"{target.label}, and the runs it started,"
            if here
            else (f"run {run.run_id if run else '(not started)'} of {target.label}")
        )
        _fail(
            INTERRUPTED,
            f"interrupted: {what} was stopped. Run the command again to start over (a function "
            "that loads its checkpoint resumes from it)",
        )
    except RunError as exc:
        _fail(
            RUN_FAILED,
            f"{target.label} did not finish: {_sentence(_first_paragraph(exc.message))}"
            + (f" The container's output is in {run.dir}/attempts/." if run else ""),
        )
    except RemoteError as exc:  # the function raised an exception that cannot be pickled
        _fail(FUNCTION_FAILED, _user_failure(target.label, exc, run))
    except PortalError as exc:  # bladekit's own refusals: mounts, pickling, settings
        _fail(RUN_FAILED, f"{target.label} could not run: {_first_paragraph(exc.message)}")
    except Exception as exc:  # the user's function raised: its own error, reported as such
        _fail(FUNCTION_FAILED, _user_failure(target.label, exc, run))
    shown = _show(value)
    if shown is not None:
        print(shown, flush=True)
    return 0


def _user_failure(label: str, exc: BaseException, run: Any) -> str:
    from bladekit.errors import RemoteError

    if isinstance(exc, RemoteError):  # not picklable: its type and traceback came back
        lines = [line for line in exc.traceback_text.splitlines() if line.strip()]
        last = lines[-1].strip() if lines else ""
        short = exc.type_name.rsplit(".", 1)[-1]
        text = last if last.split(":", 1)[0].endswith(short) else exc.type_name
        trace = exc.traceback_text
    else:
        kind = type(exc).__qualname__
        text = f"{kind}: {exc}" if str(exc) else kind
        trace = "\n".join(getattr(exc, "__notes__", [])) or text
    saved = ""
    if run is not None:
        path = run.dir / "traceback.txt"
        try:
            path.write_text(trace, encoding="utf-8")
            saved = f" Its traceback is in {path}."
        except OSError:
            pass
    where = f"run {run.run_id}" if run is not None else _where_raised(exc)
    return (
        f"{label} raised {text} ({where}). That is the function's own "
        f"error, not bladekit's: fix the function or its arguments and run again.{saved}"
    )


def _where_raised(exc: BaseException) -> str:
    """Where an exception raised in this process came from: its innermost frame's file and
    line (a local entrypoint's own code, or bladekit's when it re-raised a run's)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    return f"at {frames[-1].filename}:{frames[-1].lineno}" if frames else "here"


def _preempt(run_id: str, seconds: float) -> int:
    from bladekit.runner import find_run_dir
    from bladekit.testing import preempt_run
    from portal.core.errors import PortalError

    folder = find_run_dir(run_id)
    if not (folder / "request.json").exists():
        _fail(
            USAGE_ERROR,
            f"no run {run_id} under {folder.parent}: check the id (bladekit run prints it) and "
            "that PORTAL_HOME is the one the run used",
        )
    try:
        notice = preempt_run(run_id, seconds)
    except PortalError as exc:
        _fail(USAGE_ERROR, exc.message)
    if notice is None:
        _fail(
            USAGE_ERROR,
            f"run {run_id} runs on gpu_class='reserved' capacity, which is never preempted: "
            "nothing was sent",
        )
    print(f"bladekit: preemption notice {notice.id} sent to run {run_id} ({seconds:g} s of grace)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``bladekit`` console script; returns the exit status."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        if words[:1] == ["run"]:
            rest = words[1:]
            return _run(rest[0] if rest else None, rest[1:])
        options = parser.parse_args(words)
        if options.version:
            from importlib.metadata import version

            print(f"bladekit {version('portal-bladekit')}")
            return 0
        if options.command == "preempt":
            return _preempt(options.run_id, options.seconds)
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    except _Exit as exc:
        if exc.message:
            print(f"bladekit: {exc.message}", file=sys.stderr, flush=True)
        return exc.code


def entry() -> NoReturn:
    """``[project.scripts] bladekit``."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
