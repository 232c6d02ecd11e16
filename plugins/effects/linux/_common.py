"""Shared pieces of the Linux effect executors: namespaces, identity, descriptions.

Ownership evidence for links we create is deterministic from the operation
identity: the link is born under a temporary name derived from the effect's
marker, then takes the marker as its ifalias and its final name in one message. At
every stage recovery can tell it apart from a foreign link; a link with the
expected final name but without the marker is never adopted or deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from plugins.kernel import Kernel, Link, NsRef
from plugins.sdk import FailedPrecondition, NamespaceHandle
from plugins.sdk.runner import EffectContext

NAMESPACE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["path", "device", "inode", "bootId"],
    "properties": {
        "sandboxId": {"type": "string"},
        "path": {"type": "string", "minLength": 1},
        "device": {"type": "integer", "minimum": 0},
        "inode": {"type": "integer", "minimum": 0},
        "bootId": {"type": "string", "minLength": 1},
    },
}
HANDLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "type", "description"],
    "properties": {
        "id": {"type": "string"},
        "type": {"type": "string"},
        "description": {"type": "object"},
    },
}
IFNAME_SCHEMA: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 15}
MTU_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 68, "maximum": 65535}


def temp_name(ctx: EffectContext) -> str:
    """A deterministic 15-byte name no administrator would choose: np + 13 hex digits."""
    return "np" + hashlib.sha256(ctx.marker.encode()).hexdigest()[:13]


def open_ns(kernel: Kernel, ns: Mapping[str, Any]) -> NsRef:
    return kernel.open_namespace(
        NamespaceHandle(ns["path"], ns["device"], ns["inode"], ns["bootId"])
    )


def find_device_in(kernel: Kernel, pci: str, *where: Mapping[str, Any] | None) -> Link | None:
    """``kernel.find_device(pci)`` once the namespaces ``where`` are opened (those that
    still exist): it scans only the host's and those opened in this process, and a
    service restarted since it moved a VF into a pod has opened none yet."""
    for ns in where:
        if ns is not None:
            with contextlib.suppress(OSError):
                open_ns(kernel, ns)
    return kernel.find_device(pci)


def ns_json(ref: NsRef) -> dict[str, Any]:
    return {"path": ref.path, "device": ref.device, "inode": ref.inode, "bootId": ref.boot_id}


def describe(link: Link, physical: str, **extra: Any) -> dict[str, Any]:
    """The KernelInterface/v1 description of a link (what handles and later effects see)."""
    out: dict[str, Any] = {
        "ifName": link.name,
        "ifIndex": link.ifindex,
        "kind": link.kind,
        "mac": link.mac,
        "mtu": link.mtu,
        "netns": ns_json(link.ns),
        "physical": physical,
    }
    if link.pci_address:
        out["pciAddress"] = link.pci_address
    out.update(extra)
    return out


class MarkedByAnotherKind(FailedPrecondition):
    """A link carries our marker but is not the kind of link we create: never adopted.

    A marker is unique to one effect of one operation, so only a copy made by hand (or
    a bug) puts it on a link of another kind; that link is left for an operator.
    """


def find_owned_and_named(
    kernel: Kernel, ns: NsRef, ctx: EffectContext, kind: str, name: str
) -> tuple[Link | None, Link | None]:
    """Our ``kind`` link in ``ns`` (``owned_among``), and the link named ``name`` (ours or
    not), from one dump of ``ns``.

    One RTM_GETLINK dump answers both questions the owned-link kit asks before it acts;
    a second request (a GETLINK by name) would only see the same namespace again.
    Raises ``MarkedByAnotherKind`` when the marker sits on a link of another kind.
    """
    links = kernel.list_links(ns)
    return owned_among(links, ctx, kind), next((lk for lk in links if lk.name == name), None)


def owned_among(links: Iterable[Link], ctx: EffectContext, kind: str) -> Link | None:
    """Our ``kind`` link among ``links``: it carries our marker, or (before marking) our
    temporary name. Raises ``MarkedByAnotherKind`` when the marker sits on a link of
    another kind."""
    unmarked = None
    marker, temp = ctx.marker, temp_name(ctx)  # once, not once per link
    for link in links:
        if link.alias == marker:
            if link.kind != kind:
                raise MarkedByAnotherKind(
                    f"{link.kind} {link.name} carries the marker of our {kind} link; "
                    "it is not ours and is left alone"
                )
            return link
        if link.name == temp and link.kind == kind and not link.alias:
            unmarked = link  # the marker decides if both exist: keep looking for it
    return unmarked


def require_name_free(name: str, named: Link | None, ours: Link | None) -> None:
    """Refuse when ``named`` (the link holding ``name``) is there and is not ``ours``."""
    if named is not None and (ours is None or named.ifindex != ours.ifindex):
        raise FailedPrecondition(
            f"an interface named {name} already exists in the sandbox and is not ours"
        )


def locate(kernel: Kernel, description: Mapping[str, Any]) -> Link | None:
    """Find a described link by its identity, not its name: PCI function, or ifindex + marker."""
    pci = description.get("pciAddress")
    if isinstance(pci, str) and pci:
        return find_device_in(kernel, pci, description.get("netns"))
    try:
        ns = open_ns(kernel, description["netns"])
    except OSError:
        return None
    link = kernel.get_link(ns, ifindex=int(description["ifIndex"]))
    marker = description.get("marker")
    if link is None or (marker and link.alias != marker):
        return None
    return link
