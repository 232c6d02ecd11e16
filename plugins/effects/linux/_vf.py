"""VF effects: VF-scoped settings through the PF, the VF netdev's MTU, its move (and rename).

None of these touches PF-global state, ``sriov_numvfs`` or any other VF. Each
records a before-image of every field it changes, including those the kernel changes
as a side effect of what we ask (a move closes the link, a VF driver takes the
administrative MAC as its own); undo restores a field only if it still holds the
value we (or that side effect) left there, and quarantines on an external change.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from typing import Any

from plugins.kernel import Kernel, KernelError, Link, LinkChanges, NsRef, VFChanges, VFConfig
from plugins.sdk import FailedPrecondition
from plugins.sdk.runner import EffectContext, Observation, UndoOutcome, UndoResult

from ._common import (
    IFNAME_SCHEMA,
    MTU_SCHEMA,
    NAMESPACE_SCHEMA,
    describe,
    find_device_in,
    locate,
    open_ns,
    temp_name,
)

# Config key -> (VFConfig field, VFChanges field); VLAN, QoS and protocol travel together.
_VF_FIELDS = {
    "mac": "mac",
    "vlan": "vlan",
    "qos": "qos",
    "vlanProto": "vlan_proto",
    "spoofCheck": "spoofchk",
    "trust": "trust",
    "minTxRateMbps": "min_tx_rate",
    "maxTxRateMbps": "max_tx_rate",
    "linkState": "link_state",
}
# Before-image key of the VF netdev's own address (see SetVFConfig.capture).
NETDEV_MAC = "netdevMac"


def _vf_link(kernel: Kernel, pci: str) -> Link:
    link = kernel.find_device(pci)
    if link is None:
        raise FailedPrecondition(f"VF {pci} has no netdev (did the VF disappear?)")
    return link


def _physical(pci: str) -> str:
    return f"pci:{pci}"


class SetVFConfig:
    """PrepareVF step 1: the VF's own settings, set through its PF."""

    kind: str = "linux/set-vf-config/v1"
    outputs: tuple[str, ...] = ("vf",)
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["pf", "vfIndex", "pciAddress", "settings"],
        "additionalProperties": False,
        "properties": {
            "pf": IFNAME_SCHEMA,
            "vfIndex": {"type": "integer", "minimum": 0},
            "pciAddress": {"type": "string"},
            "settings": {"type": "object", "propertyNames": {"enum": list(_VF_FIELDS)}},
        },
    }

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def _current(self, ctx: EffectContext) -> tuple[int, VFConfig]:
        host = self.kernel.host_namespace()
        pf = self.kernel.get_link(host, name=ctx.payload["pf"])
        if pf is None:
            raise FailedPrecondition(f"PF {ctx.payload['pf']} is not in the host namespace")
        vfs = self.kernel.get_vfs(host, pf.ifindex)
        index = ctx.payload["vfIndex"]
        if index >= len(vfs):
            raise FailedPrecondition(f"PF {pf.name} has no VF {index}")
        vf_link = _vf_link(self.kernel, ctx.payload["pciAddress"])
        if vf_link.vf_of is None or vf_link.vf_of[1] != index or vf_link.vf_of[0] != pf.pci_address:
            raise FailedPrecondition(f"{ctx.payload['pciAddress']} is not VF {index} of {pf.name}")
        return pf.ifindex, vfs[index]

    def _values(self, vf: VFConfig) -> dict[str, Any]:
        return {key: getattr(vf, field) for key, field in _VF_FIELDS.items()}

    def _set(self, ctx: EffectContext, values: Mapping[str, Any]) -> None:
        pf_index, _ = self._current(ctx)
        changes = VFChanges(**{_VF_FIELDS[k]: v for k, v in values.items()})
        self.kernel.set_vf(self.kernel.host_namespace(), pf_index, ctx.payload["vfIndex"], changes)

    def _output(self, ctx: EffectContext) -> dict[str, Any]:
        pci = ctx.payload["pciAddress"]
        return describe(
            _vf_link(self.kernel, pci),
            _physical(pci),
            pf=ctx.payload["pf"],
            vfIndex=ctx.payload["vfIndex"],
        )

    def probe(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> Observation:
        now = self._values(self._current(ctx)[1])
        wanted = ctx.payload["settings"]
        if all(now[k] == v for k, v in wanted.items()):
            return Observation.OURS
        if before is not None and all(now[k] == before[k] for k in wanted):
            return Observation.ABSENT
        return Observation.CHANGED

    def capture(self, ctx: EffectContext) -> Any:
        now = self._values(self._current(ctx)[1])
        before = {k: now[k] for k in ctx.payload["settings"]}
        if "mac" in ctx.payload["settings"]:
            # The VF driver takes an administrative MAC as its netdev's address, and
            # giving the VF table its old value back (often 00:00:00:00:00:00, "none")
            # does not give the netdev its old address back: remember that one too.
            before[NETDEV_MAC] = _vf_link(self.kernel, ctx.payload["pciAddress"]).mac
        return before

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        now = self._values(self._current(ctx)[1])
        todo = {k: v for k, v in ctx.payload["settings"].items() if now[k] != v}
        if todo:
            self._set(ctx, todo)
        return {"vf": self._output(ctx)}

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> UndoResult:
        try:
            now = self._values(self._current(ctx)[1])
        except FailedPrecondition as exc:
            return UndoResult(UndoOutcome.QUARANTINED, str(exc))
        wanted = ctx.payload["settings"]
        changed = sorted(k for k, v in wanted.items() if now[k] not in (v, before[k]))
        if NETDEV_MAC in before and not self._netdev_mac_is_ours_or_restored(ctx, before):
            changed.append("netdev address")
        if changed:
            return UndoResult(UndoOutcome.QUARANTINED, f"VF fields changed externally: {changed}")
        restore = {k: before[k] for k in wanted if now[k] != before[k] and before[k] is not None}
        if restore:
            self._set(ctx, restore)
        # After the table: restoring a non-zero administrative MAC already moves the
        # netdev back, and then there is nothing left to do here.
        restored_netdev = NETDEV_MAC in before and self._restore_netdev_mac(ctx, before)
        if not restore and not restored_netdev:
            return UndoResult(UndoOutcome.ABSENT, "VF already at its before-image")
        return UndoResult(UndoOutcome.UNDONE)

    def _netdev_mac_is_ours_or_restored(self, ctx: EffectContext, before: Any) -> bool:
        """The netdev holds our MAC, its old one, or the table's old one (which the driver
        takes when undo restores the table, so a retried undo may find it there)."""
        mac = _vf_link(self.kernel, ctx.payload["pciAddress"]).mac.lower()
        expected = {ctx.payload["settings"]["mac"], before[NETDEV_MAC], before["mac"]}
        return mac in {str(m).lower() for m in expected if m}

    def _restore_netdev_mac(self, ctx: EffectContext, before: Any) -> bool:
        link = _vf_link(self.kernel, ctx.payload["pciAddress"])
        mac = link.mac.lower()
        if mac == str(before[NETDEV_MAC]).lower():
            return False
        if mac != str(ctx.payload["settings"]["mac"]).lower():
            return False  # the table restore moved it to the table's old value: leave that
        self.kernel.set_link(link.ns, link.ifindex, LinkChanges(mac=before[NETDEV_MAC]))
        return True


class SetLinkMTU:
    """PrepareVF step 2: the VF netdev's MTU (VF-scoped, in the host namespace)."""

    kind: str = "linux/set-link-mtu/v1"
    outputs: tuple[str, ...] = ("vf",)
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["mtu"],
        "additionalProperties": False,
        "properties": {"mtu": MTU_SCHEMA},
    }

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def _link(self, ctx: EffectContext) -> Link:
        return _vf_link(self.kernel, ctx.inputs["link"]["pciAddress"])

    def probe(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> Observation:
        mtu = self._link(ctx).mtu
        if mtu == ctx.payload["mtu"]:
            return Observation.OURS
        return (
            Observation.ABSENT
            if before is not None and mtu == before["mtu"]
            else Observation.CHANGED
        )

    def capture(self, ctx: EffectContext) -> Any:
        return {"mtu": self._link(ctx).mtu}

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        link = self._link(ctx)
        if link.mtu != ctx.payload["mtu"]:
            link = self.kernel.set_link(link.ns, link.ifindex, LinkChanges(mtu=ctx.payload["mtu"]))
        return {"vf": {**ctx.inputs["link"], **describe(link, _physical(link.pci_address or ""))}}

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> UndoResult:
        try:
            link = self._link(ctx)
        except FailedPrecondition as exc:
            return UndoResult(UndoOutcome.QUARANTINED, str(exc))
        if link.mtu == before["mtu"]:
            return UndoResult(UndoOutcome.ABSENT, "MTU already at its before-image")
        if link.mtu != ctx.payload["mtu"]:
            return UndoResult(UndoOutcome.QUARANTINED, f"MTU changed externally to {link.mtu}")
        self.kernel.set_link(link.ns, link.ifindex, LinkChanges(mtu=before["mtu"]))
        return UndoResult(UndoOutcome.UNDONE)


class MoveLink:
    """MoveVF step 1: move the prepared VF into the sandbox under a temporary name.

    Remembers the VF's home name, administrative state and alias: a namespace move
    closes a running device, so a VF that was up at home arrives down in the sandbox,
    and compensation must bring it up again once it is home. In the sandbox the VF
    carries our marker as its alias, the ownership evidence a node-wide scan attributes
    to this attachment even when no journal record is left: the move sets it in the
    same RTM_SETLINK, so no crash of ours can leave the VF moved but unmarked.
    Compensation returns the VF to the host namespace under its original name and alias,
    again in one message, and never deletes it.
    """

    kind: str = "linux/move-link/v1"
    outputs: tuple[str, ...] = ("link",)
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["link", "to"],
        "additionalProperties": False,
        "properties": {
            "link": {"type": "object", "required": ["description"]},
            "to": NAMESPACE_SCHEMA,
        },
    }

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def _pci(self, ctx: EffectContext) -> str:
        pci = ctx.payload["link"]["description"].get("pciAddress")
        if not isinstance(pci, str) or not pci:
            raise FailedPrecondition("the prepared handle names no PCI function")
        return pci

    def probe(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> Observation:
        link = find_device_in(self.kernel, self._pci(ctx), ctx.payload["to"])
        if link is None:
            return Observation.CHANGED  # the VF disappeared
        target = open_ns(self.kernel, ctx.payload["to"])
        return Observation.OURS if link.ns.key == target.key else Observation.ABSENT

    def capture(self, ctx: EffectContext) -> Any:
        link = _vf_link(self.kernel, self._pci(ctx))
        host = self.kernel.host_namespace()
        if link.ns.key != host.key:
            raise FailedPrecondition(f"VF {self._pci(ctx)} is not in the host namespace")
        open_ns(self.kernel, ctx.payload["to"])  # the sandbox must exist before we start
        return {"name": link.name, "up": link.up, "alias": link.alias or ""}

    def _move_in(self, ctx: EffectContext, name: str) -> tuple[NsRef, Link]:
        """The sandbox, and the VF in it: moved there from the host under ``name`` with
        our marker in one message, unless it is there already (a retry)."""
        pci = self._pci(ctx)
        target = open_ns(self.kernel, ctx.payload["to"])
        link = _vf_link(self.kernel, pci)
        if link.ns.key != target.key:
            if link.ns.key != self.kernel.host_namespace().key:
                raise FailedPrecondition(f"VF {pci} is in an unexpected namespace")
            link = self.kernel.move_link(
                link.ns, link.ifindex, target, new_name=name, alias=ctx.marker
            )
        return target, link

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        target, link = self._move_in(ctx, temp_name(ctx))
        if link.alias != ctx.marker:
            # Already in the sandbox without it: moved by a move whose rename failed
            # (which stops the message before its alias).
            link = self.kernel.set_link(target, link.ifindex, LinkChanges(alias=ctx.marker))
        return {"link": describe(link, _physical(self._pci(ctx)))}

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> UndoResult:
        link = find_device_in(self.kernel, self._pci(ctx), ctx.payload["to"])
        if link is None:
            return UndoResult(UndoOutcome.QUARANTINED, f"VF {self._pci(ctx)} disappeared")
        host = self.kernel.host_namespace()
        moved = renamed = unmarked = False
        marked = link.alias == ctx.marker
        if link.ns.key != host.key:
            # No need to take it down first: the move closes a running device itself,
            # and its admin state in the sandbox ends there. Our evidence goes with the
            # move (its last part): at home the VF has its own name and alias back.
            alias = before["alias"] if marked else None
            link = self.kernel.move_link(
                link.ns, link.ifindex, host, new_name=before["name"], alias=alias
            )
            moved = True
        else:
            if marked:
                # Home with our marker still on it (the sandbox died): its alias back.
                link = self.kernel.set_link(host, link.ifindex, LinkChanges(alias=before["alias"]))
                unmarked = True
            if link.name != before["name"]:
                # It came back by itself (the sandbox died, which closed it) under another
                # name: take ours back.
                link = self.kernel.set_link(host, link.ifindex, LinkChanges(name=before["name"]))
                renamed = True
        if link.up and not before["up"]:
            # Every way home closes the VF, so an up VF that was down before is an
            # administrator's doing: never overwritten.
            return UndoResult(UndoOutcome.QUARANTINED, f"VF {link.name} was brought up externally")
        if before["up"] and not link.up:
            # Down is how our move leaves it (also after a crash between the move home
            # and this call), so the before-image is what it gets back.
            self.kernel.set_link(host, link.ifindex, LinkChanges(up=True))
        elif not (moved or renamed or unmarked):
            return UndoResult(UndoOutcome.ABSENT, "VF already home, as it was")
        return UndoResult(UndoOutcome.UNDONE, "VF had returned; name restored" if renamed else "")


class MoveLinkNamed(MoveLink):
    """MoveVF, since ``linux/move-link/v2``: the prepared VF into the sandbox under its
    final, coordinator-assigned name, with our marker, in one RTM_SETLINK.

    ``MoveLink`` (v1) moved it under a temporary name and ``RenameLink`` renamed it, two
    journaled steps and two messages; both stay for the journals already written. The
    kernel's do_setlink applies the parts in order, move, then name, then alias (the
    ``Kernel.move_link`` contract), so the name taken in the sandbox is answered by the
    kernel itself: EEXIST, with nothing moved when the VF's own name is taken there too,
    or else with the VF moved under its own name and unmarked. Either way the step fails
    as the name check before the rename failed ("already exists in the sandbox and is
    not ours"), and the cleanup's undo (``MoveLink``'s: it finds the VF by its PCI
    address wherever it is) brings it home. Compensation is v1's: home under its own
    name and alias, admin state restored, never deleted.
    """

    kind: str = "linux/move-link/v2"
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["link", "to", "name"],
        "additionalProperties": False,
        "properties": {
            "link": {"type": "object", "required": ["description"]},
            "to": NAMESPACE_SCHEMA,
            "name": IFNAME_SCHEMA,
        },
    }

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        name, marker = ctx.payload["name"], ctx.marker
        try:
            target, link = self._move_in(ctx, name)
            if link.name != name or link.alias != marker:
                # Already in the sandbox, not all of it done: a retry after the move
                # (a crash, or the name refused by then).
                link = self.kernel.set_link(
                    target,
                    link.ifindex,
                    LinkChanges(
                        name=name if link.name != name else None,
                        alias=marker if link.alias != marker else None,
                    ),
                )
        except KernelError as exc:
            if exc.code != errno.EEXIST:
                raise
            raise FailedPrecondition(
                f"an interface named {name} already exists in the sandbox and is not ours"
            ) from None
        return {"link": describe(link, _physical(self._pci(ctx)))}


class RenameLink:
    """MoveVF step 2: the final, coordinator-assigned name inside the sandbox.

    Only ever planned after ``MoveLink`` (``effects.move_vf``), whose undo restores the
    VF's home name: so this one's undo only reads.
    """

    kind: str = "linux/rename-link/v1"
    outputs: tuple[str, ...] = ("link",)
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["name"],
        "additionalProperties": False,
        "properties": {"name": IFNAME_SCHEMA},
    }

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def _link(self, ctx: EffectContext) -> Link | None:
        return locate(self.kernel, ctx.inputs["link"])  # the moved VF, where it was moved

    def probe(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> Observation:
        link = self._link(ctx)
        if link is None:
            return Observation.CHANGED
        return Observation.OURS if link.name == ctx.payload["name"] else Observation.ABSENT

    def capture(self, ctx: EffectContext) -> Any:
        link = self._link(ctx)
        if link is None:
            raise FailedPrecondition("the moved VF disappeared")
        clash = self.kernel.get_link(link.ns, name=ctx.payload["name"])
        if clash is not None and clash.ifindex != link.ifindex:
            raise FailedPrecondition(
                f"an interface named {ctx.payload['name']} already exists in the sandbox "
                "and is not ours"
            )
        # Undo may have to take the link down to rename it back (kernels before 6.2
        # refuse to rename an UP link), so the admin state is part of the before-image.
        return {"name": link.name, "up": link.up}

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        link = self._link(ctx)
        if link is None:
            raise FailedPrecondition("the moved VF disappeared")
        if link.name != ctx.payload["name"]:
            link = self.kernel.set_link(
                link.ns, link.ifindex, LinkChanges(name=ctx.payload["name"])
            )
        return {"link": describe(link, _physical(link.pci_address or ""))}

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> UndoResult:
        link = self._link(ctx)  # shared with the undo before this one (``shared_reads``)
        if link is None or link.ns.key == self.kernel.host_namespace().key:
            return UndoResult(UndoOutcome.ABSENT, "VF no longer in the sandbox")
        if link.name != ctx.payload["name"]:
            return UndoResult(UndoOutcome.ABSENT, "VF does not carry the assigned name")
        # No change here: this step is MoveVF's second, and the move home (``MoveLink``'s
        # undo, next in this cleanup or in its resumption after a crash) gives the VF its
        # own name back in the message that moves it, from whatever name it has in the
        # sandbox. Renaming it back here first cost two round trips (down, since kernels
        # before 6.2 refuse to rename an UP link, then the rename) for a name nobody sees.
        return UndoResult(UndoOutcome.UNDONE, "left to the move home, which restores the name")
