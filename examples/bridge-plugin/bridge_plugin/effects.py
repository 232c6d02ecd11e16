"""The executor of ``example/create-bridge/v1``: only its spec, on the owned-link kit."""

from __future__ import annotations

from plugins.effects.linux import (
    MTU_SCHEMA,
    NewLink,
    OwnedLink,
    SetLinkUp,
    evidence_scan,
    owned_link_payload,
)
from plugins.kernel import Kernel, LinkSpec
from plugins.sdk.runner import EffectRegistry


def bridge_spec(new: NewLink) -> LinkSpec:
    return LinkSpec(kind="bridge", name=new.name, mtu=new.payload["mtu"])


CreateBridge = OwnedLink(
    effect_kind="example/create-bridge/v1",
    link_kind="bridge",
    payload_schema=owned_link_payload({"mtu": MTU_SCHEMA}, required=["mtu"]),
    spec=bridge_spec,
)


def bridge_effects(kernel: Kernel) -> EffectRegistry:
    """The bridge executor, the project's set-link-up, and the kit's node-wide scan."""
    return EffectRegistry([CreateBridge(kernel), SetLinkUp(kernel)], evidence=evidence_scan(kernel))
