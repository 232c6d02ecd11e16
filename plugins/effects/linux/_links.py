"""Link effects: set-up, bond creation and membership, VLAN and macvlan/ipvlan children."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugins.kernel import BondInfo, Kernel, Link, LinkChanges, LinkSpec, NsRef
from plugins.sdk import FailedPrecondition
from plugins.sdk.runner import EffectContext, Observation, UndoOutcome, UndoResult

from ._common import (
    HANDLE_SCHEMA,
    IFNAME_SCHEMA,
    MTU_SCHEMA,
    NAMESPACE_SCHEMA,
    describe,
    find_owned,
    locate,
    open_ns,
    require_name_free,
    temp_name,
)


class SetLinkUp:
    """An update-only effect on an owned link: it keeps the link's identity."""

    kind: str = "linux/set-link-up/v1"
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
        link = self._link(ctx)
        if link is None or not link.up or before["up"]:
            return UndoResult(UndoOutcome.ABSENT, "nothing to bring down")
        self.kernel.set_link(link.ns, link.ifindex, LinkChanges(up=False))
        return UndoResult(UndoOutcome.UNDONE)


class _CreateOwnedLink:
    """Create-into-namespace with ownership evidence: temporary name, marker, final name."""

    kind: str = ""
    link_kind = ""
    outputs: tuple[str, ...] = ("interface",)
    payload_schema: Mapping[str, Any] = {}

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def _spec(self, ctx: EffectContext, name: str) -> LinkSpec:
        raise NotImplementedError

    def _link_kind(self, ctx: EffectContext) -> str:
        return self.link_kind

    def _physical(self, ctx: EffectContext) -> str:
        return f"link:{ctx.marker}"

    def _ns(self, ctx: EffectContext) -> NsRef:
        return open_ns(self.kernel, ctx.payload["namespace"])

    def probe(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> Observation:
        ns = self._ns(ctx)
        ours = find_owned(self.kernel, ns, ctx, self._link_kind(ctx))
        if ours is not None:
            return Observation.OURS
        clash = self.kernel.get_link(ns, name=ctx.payload["name"])
        return Observation.FOREIGN if clash is not None else Observation.ABSENT

    def capture(self, ctx: EffectContext) -> Any:
        ns = self._ns(ctx)
        require_name_free(
            self.kernel,
            ns,
            ctx.payload["name"],
            find_owned(self.kernel, ns, ctx, self._link_kind(ctx)),
        )
        return {"existed": False}

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        ns = self._ns(ctx)
        link = find_owned(self.kernel, ns, ctx, self._link_kind(ctx))
        require_name_free(self.kernel, ns, ctx.payload["name"], link)
        if link is None:
            link = self.kernel.create_link(ns, self._spec(ctx, temp_name(ctx)))
        if link.alias != ctx.marker:
            link = self.kernel.set_link(ns, link.ifindex, LinkChanges(alias=ctx.marker))
        if link.name != ctx.payload["name"]:
            link = self.kernel.set_link(ns, link.ifindex, LinkChanges(name=ctx.payload["name"]))
        return {"interface": describe(link, self._physical(ctx), marker=ctx.marker)}

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> UndoResult:
        try:
            ns = self._ns(ctx)
        except OSError:
            # The sandbox is gone, and every virtual link in it died with it.
            return UndoResult(UndoOutcome.ABSENT, "sandbox namespace is gone")
        link = find_owned(self.kernel, ns, ctx, self._link_kind(ctx))
        if link is None:
            return UndoResult(UndoOutcome.ABSENT, "no link carries our marker")
        self.kernel.delete_link(ns, link.ifindex)
        return UndoResult(UndoOutcome.UNDONE)


class CreateBond(_CreateOwnedLink):
    kind: str = "linux/create-bond/v1"
    link_kind = "bond"
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["namespace", "name", "mode", "monitorIntervalMs", "mtu"],
        "additionalProperties": False,
        "properties": {
            "namespace": NAMESPACE_SCHEMA,
            "name": IFNAME_SCHEMA,
            "mode": {"const": "active-backup"},
            "monitorIntervalMs": {"type": "integer", "minimum": 1},
            "mtu": MTU_SCHEMA,
            "upDelayMs": {"type": "integer", "minimum": 0},
            "downDelayMs": {"type": "integer", "minimum": 0},
        },
    }

    def _spec(self, ctx: EffectContext, name: str) -> LinkSpec:
        p = ctx.payload
        bond = BondInfo(
            p["mode"], p["monitorIntervalMs"], p.get("upDelayMs", 0), p.get("downDelayMs", 0)
        )
        return LinkSpec(kind="bond", name=name, mtu=p["mtu"], bond=bond)


class CreateVLAN(_CreateOwnedLink):
    """A VLAN on a verified sandbox-local parent (layer 2 only)."""

    kind: str = "linux/create-vlan/v1"
    link_kind = "vlan"
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["parent", "namespace", "name", "vlanId", "protocol", "mtu"],
        "additionalProperties": False,
        "properties": {
            "parent": HANDLE_SCHEMA,
            "namespace": NAMESPACE_SCHEMA,
            "name": IFNAME_SCHEMA,
            "vlanId": {"type": "integer", "minimum": 1, "maximum": 4094},
            "protocol": {"enum": ["802.1Q", "802.1ad"]},
            "mtu": MTU_SCHEMA,
        },
    }

    def _parent(self, ctx: EffectContext) -> Link:
        parent = locate(self.kernel, ctx.payload["parent"]["description"])
        if parent is None or parent.ns.key != self._ns(ctx).key:
            raise FailedPrecondition("the VLAN parent is not in the sandbox namespace")
        return parent

    def capture(self, ctx: EffectContext) -> Any:
        self._parent(ctx)
        return super().capture(ctx)

    def _spec(self, ctx: EffectContext, name: str) -> LinkSpec:
        p = ctx.payload
        return LinkSpec(
            kind="vlan",
            name=name,
            mtu=p["mtu"],
            parent=self._parent(ctx).ifindex,
            vlan_id=p["vlanId"],
            vlan_protocol=p["protocol"],
        )


class CreateSharedChild(_CreateOwnedLink):
    """A macvlan (bridge) or ipvlan (l2) child of the prepared host parent, born in the sandbox.

    The parent is only referenced, never reset or reconfigured.
    """

    kind: str = "linux/create-shared-child/v1"
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["parent", "namespace", "name", "kind", "mode", "mtu"],
        "additionalProperties": False,
        "properties": {
            "parent": HANDLE_SCHEMA,
            "namespace": NAMESPACE_SCHEMA,
            "name": IFNAME_SCHEMA,
            "kind": {"enum": ["macvlan", "ipvlan"]},
            "mode": {"enum": ["bridge", "l2"]},
            "mtu": MTU_SCHEMA,
        },
    }

    def _link_kind(self, ctx: EffectContext) -> str:
        return str(ctx.payload["kind"])

    def capture(self, ctx: EffectContext) -> Any:
        self._parent(ctx)
        return super().capture(ctx)

    def _parent(self, ctx: EffectContext) -> Link:
        desc = ctx.payload["parent"]["description"]
        host = self.kernel.host_namespace()
        parent = self.kernel.get_link(host, ifindex=int(desc["ifIndex"]))
        if parent is None or parent.name != desc["ifName"]:
            raise FailedPrecondition(
                f"shared parent {desc.get('ifName')} is not in the host namespace"
            )
        return parent

    def _spec(self, ctx: EffectContext, name: str) -> LinkSpec:
        p = ctx.payload
        parent = self._parent(ctx)
        return LinkSpec(
            kind=p["kind"],
            name=name,
            mtu=p["mtu"],
            parent=parent.ifindex,
            parent_ns=parent.ns,
            mode=p["mode"],
        )


class AttachMember:
    """Enslave one owned member to our bond.

    Undo releases it and restores only what enslaving changed on it.
    """

    kind: str = "linux/attach-member/v1"
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
