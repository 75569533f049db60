"""The request a function's settings make to the control plane, as bytes.

One msgspec Struct per the house conventions (frozen, keyword-only, defaults omitted). Omitting
defaults is what the spec's promises rest on: ``best_effort=False``, ``max_interruptions=None``
and ``gpu_class="spot"`` leave the body byte-identical to one that never mentions them, so adding
these settings changed no existing request. New fields must get defaults (msgspec evolution rules).
"""

from __future__ import annotations

import msgspec

__all__ = ["FunctionRequest", "decode_request", "encode_request"]


class FunctionRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a run of one function (or class) asks of the control plane."""

    app: str
    function: str
    gpu: str | None = None
    gpu_class: str = "spot"
    best_effort: bool = False
    max_interruptions: int | None = None
    volumes: dict[str, str] = {}  # mount path -> volume name


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(FunctionRequest)


def encode_request(request: FunctionRequest) -> bytes:
    """The request body: compact JSON, fields in declaration order, defaults left out."""
    return _encoder.encode(request)


def decode_request(data: bytes | str) -> FunctionRequest:
    return _decoder.decode(data)
