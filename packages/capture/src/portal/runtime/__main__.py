"""``python -m portal.runtime``: run a script pausable, or resume a paused one.

    python -m portal.runtime run [--checkpoint PATH] [--control SOCKET] [--probe-rehearsal]
        SCRIPT [ARGS...]
    python -m portal.runtime resume [--checkpoint PATH] [--control SOCKET] [--probe-rehearsal]
        CHECKPOINT

Exit status: the script's own (0, 1 for an uncaught exception, ``sys.exit(n)``), 75 when it was
paused and its checkpoint written, 65 when Portal refuses (an incompatible interpreter or
checkpoint; the message names the error's code and the way out), 2 for a usage error.
"""

from __future__ import annotations

# First thing, before the heavy imports below: a SIGTERM from here on is noted, and becomes a
# pause request when the engine arms (see portal.runtime._early), instead of ending the process.
from portal.runtime import _early

if __name__ == "__main__":
    _early.install()

import argparse
import os
import sys

from portal.capture.distributed.rank import STORE_ENV
from portal.core.errors import PortalError
from portal.runtime.control import CONTROL_ENV
from portal.runtime.group import LauncherError, resume_group, run_group, torchrun_refusal
from portal.runtime.launcher import GRACE_ENV, resume_script, run_script
from portal.runtime.protocol import EXIT_PAUSED, EXIT_REFUSED, take_restored_mark, take_secret
from portal.runtime.rankset import is_rank_set

CHECKPOINT_ENV = "PORTAL_RUNTIME_CHECKPOINT"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m portal.runtime",
        description="Run a Python script that Portal can pause at a safe point and resume in a "
        f"new process (a paused script exits with {EXIT_PAUSED}).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--control",
        metavar="SOCKET",
        default=os.environ.get(CONTROL_ENV),
        help=f"Unix socket to listen on for the node's pause requests (env {CONTROL_ENV})",
    )
    common.add_argument(
        "--probe-rehearsal",
        action="store_true",
        help="each checkpoint check also writes a real checkpoint beside --checkpoint and "
        "deletes it, reporting its size and time (capture_probe = full, on-demand machines)",
    )
    run = commands.add_parser("run", parents=[common], help="run SCRIPT with Portal armed")
    run.add_argument(
        "--checkpoint",
        metavar="PATH",
        default=os.environ.get(CHECKPOINT_ENV),
        help=f"where a pause writes the checkpoint (env {CHECKPOINT_ENV}; "
        "default: SCRIPT's name with .portal, in the current directory)",
    )
    run.add_argument(
        "--nproc-per-node",
        metavar="N",
        type=int,
        default=0,
        help="start N ranks of a torch.distributed script, as torchrun would, pausable together "
        "(e.g. --nproc-per-node 2)",
    )
    run.add_argument("script", metavar="SCRIPT")
    run.add_argument("args", metavar="ARGS", nargs=argparse.REMAINDER)
    resume = commands.add_parser(
        "resume", parents=[common], help="continue a paused script from its checkpoint"
    )
    resume.add_argument(
        "--checkpoint",
        metavar="PATH",
        default=None,
        help="where the next pause writes its checkpoint (default: CHECKPOINT itself)",
    )
    resume.add_argument("path", metavar="CHECKPOINT")
    return parser


def main(argv: list[str] | None = None) -> int:
    take_secret()  # out of the environment before the capture reads its baseline
    take_restored_mark()
    options = _parser().parse_args(argv)
    refusal = torchrun_refusal()
    if refusal is not None:
        print(f"portal: error [{LauncherError.code}]: {refusal}", file=sys.stderr)
        return EXIT_REFUSED
    grace = float(os.environ.get(GRACE_ENV, "30"))
    try:
        if options.command == "run":
            checkpoint = options.checkpoint or (
                os.path.splitext(os.path.basename(options.script))[0] + ".portal"
            )
            if options.nproc_per_node:
                return run_group(
                    options.script,
                    options.args,
                    nproc=options.nproc_per_node,
                    checkpoint=checkpoint,
                    control=options.control,
                    grace=grace,
                )
            return run_script(
                options.script,
                options.args,
                checkpoint=checkpoint,
                control=options.control,
                rehearse=options.probe_rehearsal,
            )
        if not os.environ.get(STORE_ENV) and is_rank_set(options.path):
            return resume_group(
                options.path,
                nproc=0,
                checkpoint=options.checkpoint,
                control=options.control,
                grace=grace,
            )
        return resume_script(
            options.path,
            checkpoint=options.checkpoint,
            control=options.control,
            rehearse=options.probe_rehearsal,
        )
    except PortalError as exc:
        print(f"portal: error [{exc.code}]: {exc.message}", file=sys.stderr)
        return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
