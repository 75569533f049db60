"""The run page's Overview and banner, built from ``portal status --json``'s object.

Built on the server, not in the browser, so the words (sizes, times, the checkpoint check's
line) come from the same wording helpers as the CLI's.
"""

from __future__ import annotations

from typing import Any

from portal.control.views import checkpoint_check_line
from portal.core import units

__all__ = ["banner", "overview"]


def overview(
    status: dict[str, Any], now: float, *, key_elsewhere: str | None = None
) -> list[list[str]]:
    """The Overview's rows, ``[label, value]`` in order. ``key_elsewhere``: the job's key is
    not here (the line that says where), so its last checkpoint is as recorded, unverified."""
    attempts = status["attempts"]
    last = attempts[-1] if attempts else None
    if last is None:
        machine = "none yet"
    else:
        machine = f"{last['machine']} (attempt {last['number']}: {last['state']})"
    checkpoint = status["last_checkpoint"]
    if checkpoint is None:
        saved = "none complete"
    else:
        size = (
            "size not recorded" if checkpoint["bytes"] is None else units.size(checkpoint["bytes"])
        )
        saved = f"{checkpoint['id']} ({size}, {units.clock(checkpoint['created_at'])})"
        if key_elsewhere is not None:
            saved += ", as recorded (not verified: the key is elsewhere)"
    rows = [["State", status["state"]]]
    if status.get("error"):
        rows.append(["Error", status["error"]])
    if attempts:
        first, ended = attempts[0]["started_at"], attempts[-1]["ended_at"]
        running = status["state"] in ("running", "pausing")
        rows.append(["Started", f"{units.clock(first)} ({units.ago(now - first)})"])
        if not running and ended is not None:
            rows.append(["Ended", f"{units.clock(ended)} ({units.ago(now - ended)})"])
        rows.append(["Duration", units.duration((now if running else ended or now) - first)])
    rows += [
        ["Machine", machine],
        ["Attempts", str(len(attempts))],
        ["Last checkpoint", saved],
        ["Checkpoint check", checkpoint_check_line(status["carry"], now)],
    ]
    return rows


def banner(status: dict[str, Any]) -> dict[str, Any] | None:
    """What the reader should know first: why a failed job failed (its last words on stderr),
    the checkpoint check's warning in the spec's words, or the way on for a suspended job;
    None when all is well."""
    ref = status["name"] or status["job"]
    if status["state"] == "failed" and status.get("error"):
        code = status["attempts"][-1]["exit_code"] if status["attempts"] else None
        how = f"exit code {code}" if code is not None else "no exit code"
        return {
            "kind": "failed",
            "title": "Failed",
            "text": f"Failed ({how}): {status['error']}",
            "problems": 0,
        }
    carry = status["carry"]
    if carry["ok"] is False and carry["warning"] is not None:
        return {
            "kind": "blocked" if carry["blocked"] is not None else "warning",
            "title": "Checkpoint check",
            "text": carry["warning"],
            "problems": len(carry["problems"]),
        }
    if status["state"] == "suspended" and status["last_checkpoint"] is not None:
        return {
            "kind": "next",
            "title": "Next step",
            "text": f"Suspended at its last checkpoint: continue it with `portal resume {ref}`",
            "problems": 0,
        }
    return None
