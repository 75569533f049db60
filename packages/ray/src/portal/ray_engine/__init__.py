"""Portal on Ray: one Ray cluster per cloud region (a cell), a node agent on every Ray node.

* :class:`~portal.ray_engine.cell.Cell` — the controller: places jobs, and on a notice drains
  the node (Ray's preemption-aware drain), pauses its jobs and resumes them on other nodes; a
  node Ray declares dead has its jobs resumed from their last checkpoint.
* :class:`~portal.ray_engine.agent.NodeAgent` — the actor on each node: Portal's run, notice
  and resume (:class:`portal.jobs.Portal`, in its process); its jobs die with its node.
* :mod:`~portal.ray_engine.drain` — Ray's private drain call, wrapped once.
* :class:`~portal.ray_engine.resources.NodeKind` — spot or on-demand, notice length and machine
  type, as Ray custom resources.

Ray itself is imported only when a cell or a drain needs it.
"""

from portal.ray_engine.agent import NodeAgent
from portal.ray_engine.cell import Cell, CellNode, Move, NoNodeError
from portal.ray_engine.drain import DrainRefusedError, drain_node, draining_nodes
from portal.ray_engine.resources import NodeKind

__all__ = [
    "Cell",
    "CellNode",
    "DrainRefusedError",
    "Move",
    "NoNodeError",
    "NodeAgent",
    "NodeKind",
    "drain_node",
    "draining_nodes",
]
