"""A normalized, JSON-ready picture of the whole model, and readable differences.

Allocation counters are left out on purpose: a scenario that creates and deletes a
link leaves an equal snapshot, which is what "nothing leaked" means.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable
from typing import Any

from ._state import BondState, LinkState, State

# A link's snapshot keys, sorted: every field but ``loopback``. Taking them in this order
# builds the sorted dict directly; sorting every link's items took most of a snapshot's
# time (20 us a link, 6.5 us like this), and the rig's schedules snapshot after every step.
_ALL_FIELDS = frozenset(f.name for f in dataclasses.fields(LinkState))
_LINK_KEYS = tuple(sorted(_ALL_FIELDS - {"loopback"}))
_link_values = operator.itemgetter(*_LINK_KEYS)


def snapshot(state: State) -> dict[str, Any]:
    return {
        "boot_id": state.boot_id,
        "live_rename": state.live_rename,
        "namespaces": [
            {"path": ns.ref.path, "name": ns.name, "device": ns.ref.device, "inode": ns.ref.inode}
            for _, ns in sorted(state.namespaces.items())
        ],
        # lo is left out, as the netns and vm labs' snapshots leave it out
        "links": [_link(state, lk) for _, lk in sorted(state.links.items()) if not lk.loopback],
        "pfs": [
            {
                "pci": pf.pci,
                "capabilities": sorted(pf.capabilities),
                "vfs": [{"vf_index": i, **vars(vf)} for i, vf in enumerate(pf.vfs)],
            }
            for _, pf in sorted(state.pfs.items())
        ],
    }


def _link(state: State, lk: LinkState) -> dict[str, Any]:
    """Relations (parent, master, peer, bond slaves) are given as link ids, which unlike
    ifindexes are unique across namespaces."""
    attrs = vars(lk)
    if attrs.keys() != _ALL_FIELDS:  # an attribute set beyond the fields: the general way
        skip = ("ns", "bond", "saved", "vf_of", "loopback")
        out = {k: v for k, v in attrs.items() if k not in skip}
        out["ns"] = out["vf_of"] = out["bond"] = out["saved"] = None
        out = dict(sorted(out.items()))
    else:
        out = dict(zip(_LINK_KEYS, _link_values(attrs), strict=True))
    # assigning to present keys keeps the sorted order
    out["ns"] = state.path_of(lk.ns)
    out["vf_of"] = list(lk.vf_of) if lk.vf_of else None
    out["bond"] = None if lk.bond is None else _bond(lk.bond)
    out["saved"] = None if lk.saved is None else vars(lk.saved).copy()
    return out


def _bond(bond: BondState) -> dict[str, Any]:
    """A bond's state; ``fail_over_mac`` only when set (v0.1.0's snapshots, which the
    golden journals keep, have none: the same kernel gives the same snapshot). Its VLAN
    filter's VLAN 0 (``vid0``) is not in it: no netlink dump shows it either."""
    out = dict(vars(bond), slaves=list(bond.slaves))
    if out["fail_over_mac"] == "none":
        del out["fail_over_mac"]
    del out["vid0"]
    return out


def diff(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Human-readable differences between two snapshots; empty when they are equal."""
    if before == after:
        # What the rig asks after every crash run and schedule step, and nearly always the
        # answer: one comparison in C instead of a walk over every link's fields in Python
        # (0.16 ms a diff of the default lab). Equal snapshots have no field that differs.
        return []
    out: list[str] = []
    for key in ("boot_id", "live_rename"):
        if before.get(key) != after.get(key):
            out.append(f"~ {key}: {before.get(key)!r} -> {after.get(key)!r}")
    out += _keyed(
        before.get("namespaces", []),
        after.get("namespaces", []),
        key=lambda n: n["path"],
        label=lambda n: f"namespace {n['path']}",
    )
    out += _keyed(
        before.get("links", []),
        after.get("links", []),
        key=lambda lk: lk["id"],
        label=lambda lk: (
            f"link {lk['name']!r} ({lk['kind']}, ifindex {lk['ifindex']}) in {lk['ns']}"
        ),
    )
    pfs_b = {pf["pci"]: pf for pf in before.get("pfs", [])}
    pfs_a = {pf["pci"]: pf for pf in after.get("pfs", [])}
    out += _keyed(
        [dict(pf, vfs=None) for pf in pfs_b.values()],
        [dict(pf, vfs=None) for pf in pfs_a.values()],
        key=lambda pf: pf["pci"],
        label=lambda pf: f"pf {pf['pci']}",
    )
    for pci in sorted(pfs_b.keys() & pfs_a.keys()):
        out += _keyed(
            pfs_b[pci]["vfs"],
            pfs_a[pci]["vfs"],
            key=lambda vf: vf["vf_index"],
            label=functools.partial(_vf_label, pci),
        )
    return out


def _vf_label(pci: str, vf: dict[str, Any]) -> str:
    return f"vf {pci}#{vf['vf_index']}"


def _keyed(
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    *,
    key: Callable[[dict[str, Any]], Any],
    label: Callable[[dict[str, Any]], str],
) -> list[str]:
    b = {key(item): item for item in before}
    a = {key(item): item for item in after}
    out: list[str] = []
    for k in sorted(b.keys() | a.keys()):  # keys of one kind: all ints or all strs
        if k not in a:
            out.append(f"- {label(b[k])}")
        elif k not in b:
            out.append(f"+ {label(a[k])}")
        elif b[k] != a[k]:  # most items of two differing snapshots are equal
            for field in sorted(b[k].keys() | a[k].keys()):
                old, new = b[k].get(field), a[k].get(field)
                if old != new:
                    out.append(f"~ {label(b[k])}: {field}: {old!r} -> {new!r}")
    return out
