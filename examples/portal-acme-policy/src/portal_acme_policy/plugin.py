"""Acme's placement policy: warn when a running job's state passes a cap (``acme.max_gib``)."""

from portal.core.domain import Decision, Verdict
from portal.core.hookspecs import hookimpl
from portal.core.settings import positive_float
from portal.core.specs import PlacementPolicySpec, SettingSpec

GIB = 2**30


class StateCap:
    name = "acme"

    def evaluate(self, job, offers, context):
        """Any offer will do outside the pools that reclaimed a machine lately."""
        return [
            Decision(policy=self.name, verdict=Verdict.SKIP, reason="reclaimed lately", offer=o)
            if o.pool in context.excluded_pools
            else Decision(policy=self.name, verdict=Verdict.USE, reason="no cap at start", offer=o)
            for o in offers
        ]

    def watch(self, job, offers, context):
        """Asked at every checkpoint check while the job runs (setting placement.watch)."""
        cap, state = float(context.settings.get("acme.max_gib", 8.0)), context.state
        if state is None or state.bytes <= cap * GIB:
            return []
        why = f"its state ({state.bytes / GIB:.4g} GiB, {state.figure}) passed {cap:g} GiB"
        offer = context.settings.get("current_offer")
        return [Decision(policy=self.name, verdict=Verdict.WARN, reason=why, offer=offer)]


@hookimpl
def portal_placement_policies():
    return [PlacementPolicySpec(name="acme", factory=lambda config: StateCap())]


@hookimpl
def portal_settings():
    return [SettingSpec(name="acme.max_gib", parse=positive_float, default=8.0)]
