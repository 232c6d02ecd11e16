"""Effects on links that already exist: bring one up, enslave a member, hold a shared parent.

None of them creates a link; each restores only what it changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugins.effects import ATTACH_MEMBER, SET_LINK_UP
from plugins.kernel import Kernel, Link, LinkChanges, NsRef
from plugins.sdk import FailedPrecondition
from plugins.sdk.runner import (
    EffectContext,
    Observation,
    UndoOutcome,
    UndoResult,
    scope_evidence,
)

from ._common import HANDLE_SCHEMA, IFNAME_SCHEMA, MTU_SCHEMA, describe, locate


class SetLinkUp:
    """An update-only effect on an owned link: it keeps the link's identity.

    Undo brings the link down again, unless the link is one this scope's own plan created
    (its marker carries the scope's evidence prefix): the create comes earlier in the same
    plan, so the same cleanup deletes the link right after this undo, and the kernel
    closes a link it unregisters; or a device it moved in (``moved_home_by_this_cleanup``),
    which the move home closes. Taking a created link down first would cost a second
    RCU grace period (``dev_close`` and unregistering each wait for one: about 13 ms
    here, see docs/benchmarks.md), a moved device a round trip, for a state nobody
    sees. A link another scope owns (a prepared bond, a VF another scope moved in)
    outlives this cleanup and is brought down.
    """

    kind: str = SET_LINK_UP
    outputs: tuple[str, ...] = ()
    payload_schema: Mapping[str, Any] = {"type": "object", "additionalProperties": False}

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def _link(self, ctx: EffectContext) -> Link | None:
        return locate(self.kernel, ctx.inputs["link"])

    def probe(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> Observation:
        link = self._link(ctx)
        if link is None:
            return Observation.ABSENT
        return Observation.OURS if link.up else Observation.ABSENT

    def capture(self, ctx: EffectContext) -> Any:
        link = self._link(ctx)
        if link is None:
            raise FailedPrecondition(f"link {ctx.inputs['link'].get('ifName')} is gone")
        return {"up": link.up}

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        link = self._link(ctx)
        if link is None:
            raise FailedPrecondition(f"link {ctx.inputs['link'].get('ifName')} is gone")
        if not link.up:
            self.kernel.set_link(link.ns, link.ifindex, LinkChanges(up=True))
        return {}

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> UndoResult:
        if before is not None and before["up"]:
            return UndoResult(UndoOutcome.ABSENT, "it was up before: nothing to bring down")
        if deleted_by_this_cleanup(ctx, ctx.inputs["link"]):
            # No kernel call at all: whether it is still there and up, the create's
            # undo (next in this cleanup, or in its resumption after a crash) deletes it.
            return UndoResult(
                UndoOutcome.UNDONE, "left up: this scope created the link and deletes it next"
            )
        link = self._link(ctx)
        if link is None or not link.up:
            return UndoResult(UndoOutcome.ABSENT, "nothing to bring down")
        if moved_home_by_this_cleanup(ctx, link, self.kernel.host_namespace()):
            return UndoResult(
                UndoOutcome.UNDONE, "left up: this scope moved the device in and moves it home next"
            )
        self.kernel.set_link(link.ns, link.ifindex, LinkChanges(up=False))
        return UndoResult(UndoOutcome.UNDONE)


def moved_home_by_this_cleanup(ctx: EffectContext, link: Link, host: NsRef) -> bool:
    """Whether ``link`` is a device away from ``host`` that this scope's own plan moved
    there, so that its cleanup moves it home after this undo (``MoveLink``'s undo).

    The move put the marker of its effect on the device as its alias (the scope's
    evidence prefix: ``EffectContext.marker``); a namespace move closes a running
    device, and the move home restores its home admin state, so bringing it down here
    would be a round trip for a state nobody sees. A device already home (its namespace
    died) is not moved again, so it is brought down here. A device moved in by another
    scope (a VF the ``sriov`` plugin attached, enslaved by a bond's plan) carries that
    scope's marker and outlives this cleanup: it is brought down too.
    """
    marker = link.alias
    return (
        bool(link.pci_address)
        and link.ns.key != host.key
        and isinstance(marker, str)
        and marker.startswith(scope_evidence(ctx.partition, ctx.scope))
    )


def deleted_by_this_cleanup(ctx: EffectContext, description: Mapping[str, Any]) -> bool:
    """Whether the described link was created by this scope's plan, whose cleanup deletes it.

    A link's marker starts with the evidence prefix of the scope whose plan created it
    (``EffectContext.marker``), and a cleanup undoes its scope's whole plan in reverse:
    the effects that use the link are undone before the effect that created it.
    """
    marker = description.get("marker")
    return isinstance(marker, str) and marker.startswith(scope_evidence(ctx.partition, ctx.scope))


class AttachMember:
    """Enslave one owned member to our bond.

    Undo releases it and restores only what enslaving changed on it.
    """

    kind: str = ATTACH_MEMBER
    outputs: tuple[str, ...] = ()
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["member"],
        "additionalProperties": False,
        "properties": {"member": HANDLE_SCHEMA},
    }

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def _member(self, ctx: EffectContext) -> Link:
        member = locate(self.kernel, ctx.payload["member"]["description"])
        if member is None:
            raise FailedPrecondition(f"member {ctx.payload['member']['id']} is gone")
        return member

    def _bond(self, ctx: EffectContext) -> Link | None:
        return locate(self.kernel, ctx.inputs["bond"])

    def probe(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> Observation:
        member, bond = self._member(ctx), self._bond(ctx)
        if bond is not None and member.master == bond.ifindex:
            return Observation.OURS
        return Observation.ABSENT if member.master is None else Observation.FOREIGN

    def capture(self, ctx: EffectContext) -> Any:
        member, bond = self._member(ctx), self._bond(ctx)
        if member.master is not None and (bond is None or member.master != bond.ifindex):
            raise FailedPrecondition(
                f"member {member.name} already has a master; it is not detached by force"
            )
        return {"mtu": member.mtu, "mac": member.mac, "up": member.up}

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        member, bond = self._member(ctx), self._bond(ctx)
        if bond is None:
            raise FailedPrecondition("our bond is gone")
        if member.master != bond.ifindex:
            if member.master is not None:
                raise FailedPrecondition(f"member {member.name} was enslaved elsewhere meanwhile")
            if member.up:  # bond_enslave: "Device can not be enslaved while up" (EPERM)
                member = self.kernel.set_link(member.ns, member.ifindex, LinkChanges(up=False))
            self.kernel.set_link(member.ns, member.ifindex, LinkChanges(master=bond.ifindex))
        return {}

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> UndoResult:
        try:
            member = self._member(ctx)
        except FailedPrecondition as exc:
            return UndoResult(UndoOutcome.QUARANTINED, str(exc))
        bond = self._bond(ctx)
        if member.master is not None and (bond is None or member.master != bond.ifindex):
            return UndoResult(
                UndoOutcome.QUARANTINED, f"{member.name} is enslaved to a foreign master"
            )
        released = member.master is not None
        if released:
            member = self.kernel.set_link(member.ns, member.ifindex, LinkChanges(master=0))
        # Releasing gives back the MTU and MAC enslaving took and closes the link, which
        # apply had to take down to enslave it: give back what the before-image says
        # (also when a crash came between the release and this call).
        fix = LinkChanges(
            mtu=before["mtu"] if member.mtu != before["mtu"] else None,
            mac=before["mac"] if member.mac != before["mac"] else None,
            up=True if before["up"] and not member.up else None,
        )
        fixed = (fix.mtu, fix.mac, fix.up) != (None, None, None)
        if fixed:
            self.kernel.set_link(member.ns, member.ifindex, fix)
        if not (released or fixed):
            return UndoResult(UndoOutcome.ABSENT, "member already released, as it was")
        return UndoResult(UndoOutcome.UNDONE)


class HoldSharedParent:
    """Records one share of an allocated parent: checks it, mutates nothing."""

    kind: str = "node/hold-shared-parent/v1"
    outputs: tuple[str, ...] = ("parent",)
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["rootId", "parent", "capacity", "quantity", "kind", "mode", "mtu"],
        "additionalProperties": False,
        "properties": {
            "rootId": {"type": "string"},
            "parent": IFNAME_SCHEMA,
            "capacity": {"type": "string"},
            "quantity": {"const": 1},
            "kind": {"enum": ["macvlan", "ipvlan"]},
            "mode": {"enum": ["bridge", "l2"]},
            "mtu": MTU_SCHEMA,
        },
    }

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def _parent(self, ctx: EffectContext) -> Link:
        parent = self.kernel.get_link(self.kernel.host_namespace(), name=ctx.payload["parent"])
        if parent is None:
            raise FailedPrecondition(
                f"shared parent {ctx.payload['parent']} is not in the host namespace"
            )
        if parent.mtu < ctx.payload["mtu"]:
            raise FailedPrecondition(
                f"shared parent {parent.name} has MTU {parent.mtu}, "
                f"below the requested {ctx.payload['mtu']}; "
                "the parent is never reconfigured"
            )
        return parent

    def probe(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> Observation:
        return Observation.OURS

    def capture(self, ctx: EffectContext) -> Any:
        self._parent(ctx)
        return {}

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        parent = self._parent(ctx)
        physical = f"pci:{parent.pci_address}" if parent.pci_address else f"link:{parent.name}"
        return {
            "parent": describe(
                parent, physical, share=ctx.payload["kind"], rootId=ctx.payload["rootId"]
            )
        }

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> UndoResult:
        return UndoResult(UndoOutcome.UNDONE, "share released; the parent was never touched")
