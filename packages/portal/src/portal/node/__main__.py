"""``python -m portal.node JOB ATTEMPT [--resume CHECKPOINT] [--workdir DIR]``: the node of one
attempt.

Started by ``portal run`` / ``portal resume`` in its own session, so it outlives the CLI.
"""

from __future__ import annotations

import argparse
import logging
import sys

from portal.control.plane import ControlPlane
from portal.node.supervisor import CONTROL_TIMEOUT_S, Node


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portal.node")
    parser.add_argument("job")
    parser.add_argument("attempt", type=int)
    parser.add_argument("--resume", metavar="CHECKPOINT")
    parser.add_argument(
        "--workdir", metavar="DIR", help="run the job here (default: the job's own directory)"
    )
    options = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    plane = ControlPlane(busy_timeout_s=CONTROL_TIMEOUT_S)
    node = Node(
        plane, options.job, options.attempt, resume_from=options.resume, workdir=options.workdir
    )
    try:
        node.run()
    except Exception as exc:
        # A fault of Portal itself: say so with its code, never as the script's failure.
        logging.getLogger("portal.node").exception("node failed")
        code = getattr(exc, "code", "NODE_ERROR")
        node.report("node-error", f"Portal's node failed: {type(exc).__name__}: {exc} [{code}]")
        node.abort(exc)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
