"""``portal run --nproc-per-node N``: a torch.distributed job whose N ranks Portal launches.

The job's process is then the runtime's launcher (``python -m portal.runtime run
--nproc-per-node N``), which hosts the ranks' rendezvous, pauses them together and writes their
checkpoint as one set; a resume finds the ranks in that set. See portal.runtime.group.
"""

from __future__ import annotations

from portal.core.errors import InvalidArgumentError

__all__ = ["MAX_RANKS", "nproc_option"]

#: The most ranks one machine is asked to start (the API's limit too).
MAX_RANKS = 1024


def nproc_option(given: int | None) -> int | None:
    """``--nproc-per-node`` checked: None (one process) or 1..:data:`MAX_RANKS` ranks."""
    if given is None:
        return None
    if not 1 <= given <= MAX_RANKS:
        raise InvalidArgumentError(
            f"--nproc-per-node {given}: a job runs 1 to {MAX_RANKS} ranks on a machine; give "
            "how many to start, e.g. --nproc-per-node 2 (one per GPU)"
        )
    return given
