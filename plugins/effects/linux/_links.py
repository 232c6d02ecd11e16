"""The owned-link kit: creating a link the plugin owns, written once for every kind.

A new kind of link supplies only its spec, an ``OwnedLink``: the effect kind, the
kernel's link kind, the payload schema, a function from the payload to a ``LinkSpec``
and, when it is not the payload's ``namespace``, which namespace the link lives in.
Calling the spec with a kernel gives the executor. The ownership rule comes with it:

- the link is born under a temporary name derived from the effect's marker
  (``temp_name``), then takes the marker as its alias and its final name in one kernel
  call (the kernel renames first, so a refused rename leaves it unmarked under the
  temporary name): wherever a crash falls, what it left is recognisable as ours;
- a link is never adopted by its name: one with the final name but without our
  marker is someone else's, and so is one with our marker that is not of our kind;
- probe and undo look for our marker (before marking: the temporary name and the
  kind); undo deletes only that link, and quarantines a marked link of another kind.

The node-wide ``evidence_scan`` is here too: it finds these markers wherever the links
went, for a scope the journal no longer records.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from plugins.kernel import Kernel, KernelError, Link, LinkChanges, LinkSpec, NsRef
from plugins.sdk import FailedPrecondition
from plugins.sdk.runner import EffectContext, EvidenceScan, Observation, UndoOutcome, UndoResult

from ._common import (
    IFNAME_SCHEMA,
    NAMESPACE_SCHEMA,
    MarkedByAnotherKind,
    describe,
    find_owned_and_named,
    open_ns,
    require_name_free,
    temp_name,
)

Payload = Mapping[str, Any]


@dataclass(frozen=True)
class NewLink:
    """What a spec function sees of the link about to be created."""

    kernel: Kernel  # for read-only lookups, such as a parent; the kit does every mutation
    namespace: NsRef  # where the link is created
    payload: Payload  # the effect's payload, already checked against the kind's schema
    name: str  # the temporary name: the spec must create the link under exactly this name


def payload_namespace(kernel: Kernel, payload: Payload) -> NsRef:
    """The namespace the payload names under ``namespace`` (a sandbox's, as planned)."""
    return open_ns(kernel, payload["namespace"])


def owned_link_payload(
    properties: Mapping[str, Any], required: Sequence[str] = ()
) -> dict[str, Any]:
    """A payload schema: the final ``name``, the ``namespace``, and the kind's own fields."""
    return {
        "type": "object",
        "required": ["namespace", "name", *required],
        "additionalProperties": False,
        "properties": {"namespace": NAMESPACE_SCHEMA, "name": IFNAME_SCHEMA, **properties},
    }


@dataclass(frozen=True)
class OwnedLink:
    """Everything a kind of owned link supplies. ``OwnedLink(...)(kernel)`` is its executor.

    ``link_kind`` is the kernel's kind (``"dummy"``), or a function of the payload when
    one effect creates several kinds; probe and undo rely on it, so it must not need
    the kernel. ``spec`` may look things up (and raise ``FailedPrecondition`` when a
    prerequisite is missing); it is called at capture too, so a missing parent is
    refused before anything is recorded as applying.
    """

    effect_kind: str
    link_kind: str | Callable[[Payload], str]
    payload_schema: Mapping[str, Any]
    spec: Callable[[NewLink], LinkSpec]
    namespace: Callable[[Kernel, Payload], NsRef] = payload_namespace

    def kernel_kind(self, payload: Payload) -> str:
        return self.link_kind if isinstance(self.link_kind, str) else self.link_kind(payload)

    def __call__(self, kernel: Kernel) -> OwnedLinkExecutor:
        return OwnedLinkExecutor(self, kernel)


class OwnedLinkExecutor:
    """Probe, capture, apply and undo of one ``OwnedLink`` on one kernel."""

    outputs: tuple[str, ...] = ("interface",)

    def __init__(self, link: OwnedLink, kernel: Kernel) -> None:
        self.link = link
        self.kernel = kernel
        self.kind = link.effect_kind
        self.payload_schema = link.payload_schema

    def _namespace(self, ctx: EffectContext) -> NsRef:
        return self.link.namespace(self.kernel, ctx.payload)

    def _ours(self, ns: NsRef, ctx: EffectContext) -> tuple[Link | None, Link | None]:
        """Our link, and the link holding the payload's final name (one dump)."""
        kind = self.link.kernel_kind(ctx.payload)
        return find_owned_and_named(self.kernel, ns, ctx, kind, ctx.payload["name"])

    def _spec(self, ns: NsRef, ctx: EffectContext) -> LinkSpec:
        name, kind = temp_name(ctx), self.link.kernel_kind(ctx.payload)
        spec = self.link.spec(NewLink(self.kernel, ns, ctx.payload, name))
        if (spec.kind, spec.name) != (kind, name):
            # Under another kind or name, probe and undo could never find the link again.
            raise FailedPrecondition(
                f"{self.kind}: the spec creates {spec.kind} {spec.name}, "
                f"not the {kind} {name} the kit would look for"
            )
        return spec

    def probe(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> Observation:
        ns = self._namespace(ctx)
        try:
            ours, named = self._ours(ns, ctx)
        except MarkedByAnotherKind:
            return Observation.FOREIGN
        if ours is not None:
            return Observation.OURS
        return Observation.FOREIGN if named is not None else Observation.ABSENT

    def capture(self, ctx: EffectContext) -> Any:
        ns = self._namespace(ctx)
        self._spec(ns, ctx)  # the kind's prerequisites hold before anything is applied
        ours, named = self._ours(ns, ctx)
        require_name_free(ctx.payload["name"], named, ours)
        return {"existed": False}

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        ns = self._namespace(ctx)
        link, named = self._ours(ns, ctx)
        require_name_free(ctx.payload["name"], named, link)
        if link is None:
            link = self.kernel.create_link(ns, self._spec(ns, ctx))
        name = ctx.payload["name"]
        if link.alias != ctx.marker or link.name != name:
            # Marked and renamed in one RTM_SETLINK: do_setlink renames before it sets the
            # alias, so a refused rename (the name taken meanwhile) leaves the link unmarked
            # under its temporary name, still ours by that name; one message cannot be
            # split by a crash, so no state between the two exists to recover from.
            changes = LinkChanges(alias=ctx.marker, name=name if link.name != name else None)
            try:
                link = self.kernel.set_link(ns, link.ifindex, changes)
            except KernelError:
                self._unname_if_unmarked(ns, link.ifindex, name, temp_name(ctx))
                raise
        return {"interface": describe(link, f"link:{ctx.marker}", marker=ctx.marker)}

    def _unname_if_unmarked(self, ns: NsRef, ifindex: int, name: str, temp: str) -> None:
        """After a failed mark-and-rename: give the temporary name back to a link that was
        renamed but not marked (only a kernel out of memory for the alias does that), so
        that it stays recognisable as ours instead of passing for a foreign ``name``."""
        with contextlib.suppress(KernelError):
            link = self.kernel.get_link(ns, ifindex=ifindex)
            if link is not None and link.name == name and not link.alias:
                self.kernel.set_link(ns, ifindex, LinkChanges(name=temp))

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> UndoResult:
        try:
            ns = self._namespace(ctx)
        except OSError:
            # The sandbox is gone, and every virtual link in it died with it.
            return UndoResult(UndoOutcome.ABSENT, "sandbox namespace is gone")
        try:
            link, _ = self._ours(ns, ctx)
        except MarkedByAnotherKind as exc:
            return UndoResult(UndoOutcome.QUARANTINED, exc.message)
        if link is None:
            return UndoResult(UndoOutcome.ABSENT, "no link carries our marker")
        self.kernel.delete_link(ns, link.ifindex)
        return UndoResult(UndoOutcome.UNDONE)


def evidence_scan(kernel: Kernel) -> EvidenceScan:
    """Every link on the node whose marker starts with a prefix, in every namespace.

    Markers sit in the ifalias of the links we create; this finds them wherever they
    are, including namespaces no journal record names any more.
    """

    def scan(prefix: str) -> list[tuple[str, str]]:
        found = []
        for ns in kernel.list_namespaces():
            for link in kernel.list_links(ns):
                if link.alias and link.alias.startswith(prefix):
                    where = ns.path or f"namespace {ns.device}:{ns.inode}"
                    found.append((link.alias, f"{link.kind} {link.name} in {where}"))
        return found

    return scan
