"""The executor of ``linux/create-dummy/v1``, written against the public kernel interface.

Ownership evidence follows the project's rule: the link is born under a name
derived from the effect's marker, then carries the marker as its alias, then
takes its final name; a link with the final name but without our marker is
someone else's and is never adopted or deleted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from plugins.kernel import Kernel, Link, LinkChanges, LinkSpec, NsRef
from plugins.sdk import FailedPrecondition, NamespaceHandle
from plugins.sdk.runner import EffectContext, EffectRegistry, Observation, UndoOutcome, UndoResult


class CreateDummy:
    kind: str = "linux/create-dummy/v1"
    outputs: tuple[str, ...] = ("interface",)
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["name", "mtu", "namespace"],
        "properties": {
            "name": {"type": "string"},
            "mtu": {"type": "integer"},
            "namespace": {"type": "object"},
        },
    }

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def _ns(self, ctx: EffectContext) -> NsRef:
        n = ctx.payload["namespace"]
        return self.kernel.open_namespace(
            NamespaceHandle(n["path"], n["device"], n["inode"], n["bootId"])
        )

    def _temp(self, ctx: EffectContext) -> str:
        return "dm" + hashlib.sha256(ctx.marker.encode()).hexdigest()[:13]

    def _ours(self, ctx: EffectContext, ns: NsRef) -> Link | None:
        for link in self.kernel.list_links(ns):
            if link.alias == ctx.marker or (link.name == self._temp(ctx) and not link.alias):
                return link
        return None

    def probe(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> Observation:
        ns = self._ns(ctx)
        if self._ours(ctx, ns):
            return Observation.OURS
        return (
            Observation.FOREIGN
            if self.kernel.get_link(ns, name=ctx.payload["name"])
            else Observation.ABSENT
        )

    def capture(self, ctx: EffectContext) -> Any:
        ns = self._ns(ctx)
        clash = self.kernel.get_link(ns, name=ctx.payload["name"])
        if clash is not None and clash.alias != ctx.marker:
            raise FailedPrecondition(
                f"{ctx.payload['name']} already exists in the sandbox and is not ours"
            )
        return {}

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        ns = self._ns(ctx)
        link = self._ours(ctx, ns)
        clash = self.kernel.get_link(ns, name=ctx.payload["name"])
        if clash is not None and (link is None or clash.ifindex != link.ifindex):
            raise FailedPrecondition(
                f"{ctx.payload['name']} already exists in the sandbox and is not ours"
            )
        if link is None:
            spec = LinkSpec(
                kind="dummy",
                name=self._temp(ctx),
                mtu=ctx.payload["mtu"],
                mac=ctx.payload.get("mac"),
            )
            link = self.kernel.create_link(ns, spec)
        if link.alias != ctx.marker:
            link = self.kernel.set_link(ns, link.ifindex, LinkChanges(alias=ctx.marker))
        if link.name != ctx.payload["name"]:
            link = self.kernel.set_link(ns, link.ifindex, LinkChanges(name=ctx.payload["name"]))
        netns = {"path": ns.path, "device": ns.device, "inode": ns.inode, "bootId": ns.boot_id}
        description = {
            "ifName": link.name,
            "ifIndex": link.ifindex,
            "kind": "dummy",
            "mac": link.mac,
            "mtu": link.mtu,
            "netns": netns,
            "physical": f"link:{ctx.marker}",
            "marker": ctx.marker,
        }
        return {"interface": description}

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> UndoResult:
        try:
            ns = self._ns(ctx)
        except OSError:
            return UndoResult(UndoOutcome.ABSENT, "sandbox gone")
        link = self._ours(ctx, ns)
        if link is None:
            return UndoResult(UndoOutcome.ABSENT, "no link carries our marker")
        self.kernel.delete_link(ns, link.ifindex)
        return UndoResult(UndoOutcome.UNDONE)


def dummy_effects(kernel: Kernel) -> EffectRegistry:
    """The dummy executor plus the project's approved set-link-up executor.

    Its markers sit in link aliases like the project's own, so the project's node-wide
    scan finds what it leaves behind when no journal record is left.
    """
    from plugins.effects.linux import SetLinkUp, evidence_scan

    return EffectRegistry([CreateDummy(kernel), SetLinkUp(kernel)], evidence=evidence_scan(kernel))
