"""Ray's preemption-aware drain, behind one Portal interface.

Ray's GCS client has ``drain_node(node_id, DRAIN_NODE_REASON_PREEMPTION, message, deadline_ms)``:
the node stops taking new work, the autoscaler and Ray Serve see it as going, and
``get_draining_nodes()`` reports its deadline. The call is private and marked unstable (``ray
drain-node`` is a hidden command), so Portal calls it here and nowhere else; the tests run it
against the installed Ray. Two traps it guards against:

* the node id must be the hex string: a binary or malformed id is "accepted" as the nil id and
  drains nothing, so the id is checked before, and the drain is confirmed after;
* a draining node cannot be un-drained: a withdrawn notice leaves it draining until it goes.
"""

from __future__ import annotations

import re
import time
from typing import Any

from portal.core.errors import InvalidArgumentError, PortalError

__all__ = ["DrainRefusedError", "drain_node", "draining_nodes"]

_NODE_ID = re.compile(r"[0-9a-f]{56}")


class DrainRefusedError(PortalError):
    """Ray did not accept (or did not carry out) a drain."""

    code = "RAY_DRAIN_REFUSED"


def _gcs_client(gcs_address: str | None) -> Any:
    import ray

    if gcs_address is None:
        if not ray.is_initialized():
            raise InvalidArgumentError(
                "draining a Ray node needs the cluster: call ray.init(address=...) first, or give "
                "gcs_address (host:port of the head node's GCS)"
            )
        gcs_address = ray.get_runtime_context().gcs_address
    raylet: Any = ray._raylet  # private and untyped: the reason this module exists
    return raylet.GcsClient(address=gcs_address)


def _check_node_id(node_id: str) -> None:
    if not _NODE_ID.fullmatch(node_id):
        raise InvalidArgumentError(
            f"Ray node id {node_id!r} is not a node id: give the 56-character hex id as "
            "ray.nodes()[i]['NodeID'] shows it",
            details={"node_id": node_id},
        )


def drain_node(
    node_id: str, deadline_s: float, message: str, *, gcs_address: str | None = None
) -> float:
    """Drain ``node_id`` for preemption, its machine going in ``deadline_s`` seconds.

    Returns the deadline as Ray recorded it (seconds since the epoch). Raises
    :class:`DrainRefusedError` when Ray refuses it (a head node, an unknown or dead node).
    """
    from ray.core.generated import autoscaler_pb2

    _check_node_id(node_id)
    if deadline_s < 0:
        raise InvalidArgumentError(
            f"a drain deadline of {deadline_s:g} s is in the past: give the seconds left until "
            "the machine goes (0 or more)",
            details={"deadline_s": deadline_s},
        )
    gcs = _gcs_client(gcs_address)
    deadline_ms = int((time.time() + deadline_s) * 1000)
    reasons: Any = autoscaler_pb2
    reason = reasons.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")
    accepted, why = gcs.drain_node(node_id, reason, message, deadline_ms)
    if not accepted:
        raise DrainRefusedError(
            f"Ray refused to drain node {node_id}: {why or 'no reason given'}; its jobs are "
            "moved all the same, but new work may still be placed there",
            details={"node_id": node_id, "reason": why},
        )
    recorded = dict(gcs.get_draining_nodes()).get(node_id)
    if recorded is None:
        raise DrainRefusedError(
            f"Ray accepted the drain of node {node_id} but does not list it as draining (an id "
            "of a node it does not know, or a Ray whose drain call changed); check `ray "
            "list nodes` and the installed Ray version",
            details={"node_id": node_id},
        )
    return int(recorded) / 1000.0 if recorded else time.time() + deadline_s


def draining_nodes(*, gcs_address: str | None = None) -> dict[str, float | None]:
    """Every draining node's id and its deadline (seconds since the epoch; None: no deadline)."""
    gcs = _gcs_client(gcs_address)
    return {
        str(node): (int(ms) / 1000.0 if ms else None)
        for node, ms in dict(gcs.get_draining_nodes()).items()
    }
