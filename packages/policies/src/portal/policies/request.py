"""What the user asked for: ``--on SPEC``, ``--gpu G``, ``--no-spot``, spot only.

Every flag is checked against what exists before any policy runs, so a typo is an error that
names the flag and the way out, never a silent "no offer".
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

import attrs

from portal.core.domain import CapacityClass, MachineType, Offer
from portal.core.errors import InvalidArgumentError

__all__ = ["Action", "OnSpec", "PlacementRequest", "gpu_matches", "known_gpu_models"]

_CAPACITY_WORDS = {
    "spot": CapacityClass.SPOT,
    "on-demand": CapacityClass.ON_DEMAND,
    "on_demand": CapacityClass.ON_DEMAND,
    "ondemand": CapacityClass.ON_DEMAND,
    "reserved": CapacityClass.RESERVED,
}
_SPEC_FORM = (
    "[spot:|on-demand:]PROVIDER:TYPE[:REGION or ZONE], e.g. spot:aws:c7i.large:us-east-1 or "
    "aws:m7i.xlarge"
)


@attrs.frozen(kw_only=True)
class OnSpec:
    """A machine named with ``--on``: ``[CAPACITY:]PROVIDER:TYPE[:WHERE]``, or just ``TYPE``.

    The form is an offer's pool identity (``spot:aws:c7i.large:us-east-1a``), so a pool shown in
    a plan can be pasted back. A spec is *exact* when it names the capacity, the provider and the
    type: only then is it the user's choice that the state bound does not overrule.
    """

    text: str
    type_name: str
    provider: str | None = None
    capacity: CapacityClass | None = None
    where: str | None = None

    @classmethod
    def parse(cls, text: str) -> OnSpec:
        parts = [p.strip() for p in text.strip().split(":")]
        if not text.strip() or any(not p for p in parts):
            raise InvalidArgumentError(
                f"--on {text!r} is not a machine spec: write {_SPEC_FORM}",
                details={"on": text},
            )
        capacity = _CAPACITY_WORDS.get(parts[0].lower())
        if capacity is not None:
            parts = parts[1:]
        if not 1 <= len(parts) <= 3:
            raise InvalidArgumentError(
                f"--on {text!r} is not a machine spec: write {_SPEC_FORM}",
                details={"on": text},
            )
        if len(parts) == 1:
            return cls(text=text, type_name=parts[0], capacity=capacity)
        return cls(
            text=text,
            provider=parts[0].lower(),
            type_name=parts[1],
            where=parts[2] if len(parts) == 3 else None,
            capacity=capacity,
        )

    @property
    def exact(self) -> bool:
        return self.capacity is not None and self.provider is not None

    def matches(self, offer: Offer) -> bool:
        if self.capacity is not None and offer.capacity is not self.capacity:
            return False
        if self.provider is not None and offer.provider.lower() != self.provider:
            return False
        if offer.machine_type.name.lower() != self.type_name.lower():
            return False
        return self.where is None or self.where in (offer.region, offer.zone)

    def select(self, offers: Sequence[Offer]) -> list[Offer]:
        """The offers it names; none is an error that lists what the provider offers instead."""
        found = [o for o in offers if self.matches(o)]
        if found:
            return found
        near = sorted(
            {
                f"{o.provider}:{o.machine_type.name}"
                for o in offers
                if self.provider is None or o.provider.lower() == self.provider
            }
        )
        shown = ", ".join(near[:12]) + (", ..." if len(near) > 12 else "")
        raise InvalidArgumentError(
            f"--on {self.text!r} matches no offer now"
            + (f"; offered types: {shown}" if shown else "; nothing is offered")
            + ". Check the type and region, or leave --on out and let the policy choose",
            details={"on": self.text},
        )


def _gpu_words(model: str) -> list[str]:
    return model.lower().split()


def gpu_matches(wanted: str, model: str | None) -> bool:
    """``--gpu A100`` matches ``A100 40GB`` and ``A100 80GB``; ``--gpu "A100 80GB"`` only that.

    Compared word by word, ignoring case: catalogs spell memory variants after the model name.
    """
    if model is None:
        return False
    want = _gpu_words(wanted)
    return bool(want) and _gpu_words(model)[: len(want)] == want


def known_gpu_models(machine_types: Iterable[MachineType], offers: Iterable[Offer]) -> list[str]:
    """Every GPU model the catalogs and the offers know, sorted."""
    models = {m.gpu_model for m in machine_types if m.gpu_model}
    models |= {o.machine_type.gpu_model for o in offers if o.machine_type.gpu_model}
    return sorted(m for m in models if m)


class Action(enum.StrEnum):
    RESUME = "resume"
    MOVE = "move"
    RUN = "run"


@attrs.frozen(kw_only=True)
class PlacementRequest:
    """The user's request for a plan (``portal resume|move [--plan] ...``)."""

    action: Action = attrs.field(default=Action.RESUME, converter=Action)
    on: OnSpec | None = None
    gpu: str | None = None
    no_spot: bool = False
    spot_only: bool = False
    #: ``--memory`` given with this command (else the job's own): the least machine memory.
    memory_gib: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.no_spot and self.spot_only:
            raise InvalidArgumentError(
                "--no-spot and a spot-only job contradict each other: drop --no-spot, or resume "
                "the job with its spot-only setting off"
            )
        if self.gpu is not None and not self.gpu.strip():
            raise InvalidArgumentError("--gpu needs a GPU model, e.g. --gpu L4")

    @classmethod
    def from_flags(
        cls,
        action: Action | str = Action.RESUME,
        *,
        on: str | None = None,
        gpu: str | None = None,
        no_spot: bool = False,
        spot_only: bool = False,
        memory_gib: float | None = None,
    ) -> PlacementRequest:
        """As the CLI builds it from its flags (``on`` is parsed here, so errors come early)."""
        return cls(
            action=Action(action),
            on=OnSpec.parse(on) if on is not None else None,
            gpu=gpu,
            no_spot=no_spot,
            spot_only=spot_only,
            memory_gib=memory_gib,
        )

    def flags(self) -> str:
        """The flags as the user typed them (the plan's D1 line repeats them)."""
        words = []
        if self.on is not None:
            words.append(f"--on {self.on.text}")
        if self.gpu is not None:
            words.append(f"--gpu {self.gpu}")
        if self.no_spot:
            words.append("--no-spot")
        if self.spot_only:
            words.append("(spot only)")
        if self.memory_gib is not None:
            words.append(f"--memory {self.memory_gib:g}")
        return " ".join(words)
