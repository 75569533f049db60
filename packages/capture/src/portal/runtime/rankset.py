"""A multi-process job's checkpoint: one file holding every rank's part, the manifest last.

The set is itself a checkpoint image (:mod:`portal.capture.image`): its header says how many
ranks (``ranks``), its state section is the manifest (JSON, below), and its buffers are the
parts, each a whole rank checkpoint, in rank order. So everything that moves a checkpoint (the
node's streaming upload, the store, encryption, ``portal status``) treats the set as the one
checkpoint it is, and the image's checksum covers every part. A rank resumes from its part in
place (``read_image(path, span=...)``): nothing is copied out.

The set is written only once every rank's part is (the launcher's commit), under a temporary
name renamed at the end: a set on disk is always whole, and the previous one stays in force
until the new one replaces it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import msgspec

from portal.capture.errors import CheckpointCorruptError
from portal.capture.image import (
    PREFIX_BYTES,
    CheckpointImage,
    Header,
    ImageLayout,
    header_length,
    write_image,
)
from portal.core.errors import CapturePortalError, PortalError

__all__ = [
    "PartEntry",
    "RankSetMismatchError",
    "SetManifest",
    "is_rank_set",
    "part_span",
    "read_layout",
    "read_manifest",
    "write_set",
]

KIND: Final = "portal.rank-set"


class RankSetMismatchError(CapturePortalError):
    """A checkpoint set whose parts do not belong together, or cannot resume here."""

    code = "CAPTURE_RANK_SET_MISMATCH"


class PartEntry(msgspec.Struct, frozen=True, kw_only=True):
    rank: int
    bytes: int
    paused_at: str
    seconds_to_safe_point: float = 0.0


class SetManifest(msgspec.Struct, frozen=True, kw_only=True):
    kind: str = KIND
    world_size: int
    #: The launcher's commit round the parts were written in (all the same, by construction).
    round: int = 0
    parts: list[PartEntry] = msgspec.field(default_factory=list)
    torch: str = ""


_encode = msgspec.json.Encoder().encode
_decode_manifest = msgspec.json.Decoder(SetManifest).decode


def _read_head(path: Path) -> ImageLayout:
    with open(path, "rb") as fh:
        prefix = fh.read(PREFIX_BYTES)
        raw = fh.read(header_length(prefix, str(path)))
    return ImageLayout.parse(prefix, raw, str(path))


def read_layout(path: str | os.PathLike[str]) -> ImageLayout:
    """The set's (or any image's) prefix and header, without reading its state."""
    return _read_head(Path(path))


def is_rank_set(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a multi-process job's checkpoint set (False for anything else,
    including what cannot be read: the single-process resume then says what is wrong)."""
    try:
        return _read_head(Path(path)).header.ranks > 0
    except (OSError, PortalError):
        return False


def part_span(path: str | os.PathLike[str], rank: int) -> tuple[int, int]:
    """Where rank ``rank``'s part lies in the set at ``path``: ``(offset, length)``."""
    layout = _read_head(Path(path))
    header = layout.header
    if not 0 <= rank < header.ranks or len(header.buffer_lengths) != header.ranks:
        raise RankSetMismatchError(
            f"checkpoint {os.fspath(path)!r} holds {header.ranks} rank part(s); it has no part "
            f"for rank {rank}. Resume the job with as many ranks as it paused with"
        )
    return layout.spans()[f"buffer {rank}"]


def read_manifest(path: str | os.PathLike[str]) -> SetManifest:
    """The set's manifest (its state section), checked against its header."""
    layout = _read_head(Path(path))
    with open(path, "rb") as fh:
        offset, length = layout.spans()["state"]
        fh.seek(offset)
        raw = fh.read(length)
    try:
        manifest = _decode_manifest(raw)
    except msgspec.DecodeError as exc:
        raise CheckpointCorruptError(
            f"checkpoint {os.fspath(path)!r} is damaged: its manifest cannot be read ({exc}). "
            "Resume from an earlier checkpoint of the job"
        ) from exc
    if manifest.kind != KIND or manifest.world_size != layout.header.ranks:
        raise CheckpointCorruptError(
            f"checkpoint {os.fspath(path)!r} is damaged: its manifest does not match its "
            "header. Resume from an earlier checkpoint of the job"
        )
    return manifest


def _summary(entries: Sequence[PartEntry]) -> str:
    """Where the ranks paused, as one line: one place, or each rank's."""
    places = {e.paused_at for e in entries}
    if len(places) == 1:
        return f"{places.pop()} (every rank)"
    return "; ".join(f"rank {e.rank}: {e.paused_at}" for e in entries)


def write_set(
    parts: Sequence[Path], entries: Sequence[PartEntry], target: Path, *, round_: int
) -> tuple[int, Header]:
    """Write the set of ``parts`` (rank order) to ``target``; return its size and header.

    The parts are mapped, not read: their bytes go from the page cache to the set's file. Each
    starts at a multiple of 64 in the set, so its buffers keep the alignment its own file gave
    them (read in place, ``read_image(path, span=...)``)."""
    first = _read_head(parts[0]).header
    heads = [_read_head(p).header for p in parts]
    for rank, head in enumerate(heads):
        record = head.rank
        if record is None or record.rank != rank or record.world_size != len(parts):
            raise RankSetMismatchError(
                f"part {parts[rank]} is not rank {rank} of {len(parts)}: the parts do not "
                "belong to one pause"
            )
    manifest = SetManifest(
        world_size=len(parts),
        round=round_,
        parts=list(entries),
        torch=heads[0].rank.torch if heads[0].rank is not None else "",
    )
    header = Header(
        interpreter=first.interpreter,
        script=first.script,
        argv=list(first.argv),
        cwd=first.cwd,
        created=max(h.created for h in heads),
        paused_at=_summary(entries),
        safe_point_time=max(h.safe_point_time for h in heads),
        requested_time=min(h.requested_time for h in heads),
        ranks=len(parts),
    )
    handles = [open(p, "rb") for p in parts]  # noqa: SIM115 - closed below
    maps = [mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) for fh in handles]
    views = [memoryview(m) for m in maps]
    try:
        size = write_image(
            CheckpointImage(
                header=header,
                pickle=_encode(manifest),
                buffers=views,
                alignments=[0] * len(views),
            ),
            target,
        )
    finally:
        for view in views:
            with contextlib.suppress(BufferError):  # a slice still held: freed with it
                view.release()
        for m in maps:
            with contextlib.suppress(BufferError):
                m.close()
        for fh in handles:
            fh.close()
    return size, header
