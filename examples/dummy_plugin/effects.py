"""The executor of ``linux/create-dummy/v1``: only its spec, on the owned-link kit.

The kit (``plugins.effects.linux.OwnedLink``) brings the project's ownership rule: the
link is born under a temporary name derived from the effect's marker, takes the marker
as its alias, then its final name; a link with the final name but without our marker,
or with our marker but of another kind, is someone else's and is never adopted or
deleted.
"""

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


def dummy_spec(new: NewLink) -> LinkSpec:
    return LinkSpec(kind="dummy", name=new.name, mtu=new.payload["mtu"], mac=new.payload.get("mac"))


CreateDummy = OwnedLink(
    effect_kind="linux/create-dummy/v1",
    link_kind="dummy",
    payload_schema=owned_link_payload(
        {"mtu": MTU_SCHEMA, "mac": {"type": ["string", "null"]}}, required=["mtu"]
    ),
    spec=dummy_spec,
)


def dummy_effects(kernel: Kernel) -> EffectRegistry:
    """The dummy executor plus the project's approved set-link-up executor.

    Its markers sit in link aliases like the project's own, so the kit's node-wide
    scan finds what it leaves behind when no journal record is left.
    """
    return EffectRegistry([CreateDummy(kernel), SetLinkUp(kernel)], evidence=evidence_scan(kernel))
