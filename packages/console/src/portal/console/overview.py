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
    return [
        ["State", status["state"]],
        ["Machine", machine],
        ["Attempts", str(len(attempts))],
        ["Last checkpoint", saved],
        ["Checkpoint check", checkpoint_check_line(status["carry"], now)],
    ]


def banner(status: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint check's banner: the warning in the spec's words, or None when all is well
    (or nothing was checked yet)."""
    carry = status["carry"]
    if carry["ok"] is not False or carry["warning"] is None:
        return None
    return {
        "kind": "blocked" if carry["blocked"] is not None else "warning",
        "text": carry["warning"],
        "problems": len(carry["problems"]),
    }
