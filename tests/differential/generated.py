"""Steps of the generated differential runs: what one step is, how it runs on a world,
and how two worlds' outcomes and whole states are compared.

A step is a JSON object naming links by name and namespaces by label (never by
ifindex), so the same step runs on the fake and in the guest, is printed in the log,
replays during shrinking, and is written into a regression scenario as it is. Ops:

* ``ns_add`` / ``ns_del`` ``{ns}``: a namespace labelled ``ns`` made or killed;
* ``create`` ``{ns, kind, name, ...}``: ``name`` may be a template (``dum%d``) or ""
  (the kernel picks ``<kind>%d``); ``parent``, ``vlan_id``, ``mode``, ``peer``,
  ``peer_ns``, ``bond_mode``, ``miimon``, ``mtu``, ``mac`` as the kind takes them;
* ``delete`` ``{ns, link}``, ``move`` ``{ns, link, to, new_name?}``;
* ``set`` ``{ns, link, changes}``: set_link; ``changes["master"]`` names the bond
  ("" releases);
* ``options`` ``{ns, link, kind, ...}``: set_link_options (``active_slave`` by name);
* ``numvfs`` ``{pf, count}``: the PF's ``sriov_numvfs`` written as it is;
* ``set_vf`` ``{pf, vf, changes}``: one VF's settings through its PF.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from plugins.kernel import BondInfo, KernelError, LinkChanges, LinkOptions, LinkSpec, VFChanges

from .world import GUEST_PFS, HOST, MISSING_IFINDEX, PORT_LINK_VF_CHANGES, World, errno_name

Step = dict[str, Any]
# How a step finds a link's ifindex: (world, namespace label, link name) -> ifindex.
Resolve = Callable[[World, str, str], int]
LOOPBACK_IFINDEX = 1  # lo is ifindex 1 in every namespace (the fake models it so too)


def resolve_by_call(world: World, label: str, name: str) -> int:
    """A get_link per name: for a world that is not observed after every step."""
    if label not in world.labels():
        return MISSING_IFINDEX
    return world.ifindex(world.ref(label), name)


def resolve_from_last_observation(world: World, label: str, name: str) -> int:
    """The ifindex the last ``observe()`` saw (a session observes after every step, so
    that is the state the next step runs in); lo is not in the guest's snapshot."""
    if name == "lo":
        return LOOPBACK_IFINDEX
    return world.last_ifindex.get(label, {}).get(name, MISSING_IFINDEX)


def describe(step: Step) -> str:
    """One line for the log (``parse_described`` reads it back)."""
    rest = ", ".join(f"{k}={v!r}" for k, v in step.items() if k != "op")
    return f"{step['op']} {rest}"


_LOGGED_STEP = re.compile(r"step (\d+): (\w+) ?(.*) -> fake \S+, linux \S+")
_LOGGED_DIVERGENCE = re.compile(r"divergence \(\w+\): .* after (\d+) steps since a reset")


def parse_described(op: str, rest: str) -> Step:
    """The step ``describe`` wrote as ``op rest``."""
    call = ast.parse(f"f({rest})", mode="eval").body
    assert isinstance(call, ast.Call)
    step: Step = {"op": op}
    for keyword in call.keywords:
        step[str(keyword.arg)] = ast.literal_eval(keyword.value)
    return step


def logged_trace(lines: list[str], number: int) -> list[Step]:
    """The steps since the last reset up to step ``number`` of a session's log, when that
    step diverged (the trace a session keeps for shrinking, read back from its log)."""
    steps: dict[int, Step] = {}
    for i, line in enumerate(lines):
        found = _LOGGED_STEP.fullmatch(line)
        if found is None:
            continue
        steps[int(found.group(1))] = parse_described(found.group(2), found.group(3))
        if int(found.group(1)) != number:
            continue
        after = _LOGGED_DIVERGENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if after is None:
            raise ValueError(f"step {number} of the log did not diverge")
        length = int(after.group(1))
        return [steps[n] for n in range(number - length + 1, number + 1)]
    raise ValueError(f"no step {number} in the log")


def run_step(world: World, step: Step, resolve: Resolve = resolve_by_call) -> str:
    """Run ``step`` on ``world`` (logged in ``world.log``); "ok" or the errno's name."""
    op = step["op"]
    missing = _dead_namespace(world, step)
    if missing is not None:
        # only a shrunk sequence names one (its ns_add was left out): the same on both
        world.log.append({"call": describe(step), "errno": NO_NAMESPACE})
        return NO_NAMESPACE
    if op == "ns_add":
        world.ns(step["ns"])
        world.log.append({"call": describe(step), "ok": None})
        return "ok"
    if op == "ns_del":
        try:
            world.kill_ns(step["ns"])
        except KernelError as exc:
            world.log.append({"call": describe(step), "errno": errno_name(exc.code)})
            return errno_name(exc.code)
        world.log.append({"call": describe(step), "ok": None})
        return "ok"
    if op == "numvfs":
        outcome = world.numvfs(step["pf"], step["count"])
        for pf in _ports_reset(step):
            world.settle_port(pf)
        return "ok" if outcome[0] == "ok" else str(outcome[1])
    for pf in _ports_asked(step):
        world.settle_port(pf)
    call = _call_of(world, step, resolve)
    outcome = world.attempt(call, describe(step))
    for pf in _ports_reset(step):
        world.settle_port(pf)
    return "ok" if outcome[0] == "ok" else str(outcome[1])


# What depends on a PF port's link (a VF rate; a PF made a bond's active slave, which
# must have carrier) waits for it first, and a step that resets a PF (open, close, an
# MTU change, an enslave or release, which open and close it) waits for it after, so
# the observation does not fall inside QEMU's 500 ms of autonegotiation (World.settle_port).
def _ports_asked(step: Step) -> list[str]:
    if step["op"] == "set_vf" and PORT_LINK_VF_CHANGES & step["changes"].keys():
        return [step["pf"]]
    if step["op"] == "options" and step.get("active_slave") in GUEST_PFS:
        return [str(step["active_slave"])]
    return []


def _ports_reset(step: Step) -> list[str]:
    if step["op"] == "numvfs":
        return [str(step["pf"])]
    on_a_pf = step["op"] == "set" and step["link"] in GUEST_PFS and step.get("ns") == HOST
    if on_a_pf and {"up", "mtu", "master"} & step["changes"].keys():
        return [str(step["link"])]
    return []


NO_NAMESPACE = "no such namespace"  # the outcome of a step naming a dead namespace


def _dead_namespace(world: World, step: Step) -> str | None:
    """The label ``step`` needs alive (or, for ``ns_add``, absent) that is not."""
    live = world.labels()
    if step["op"] == "ns_add":
        return step["ns"] if step["ns"] in live else None
    for key in ("ns", "to", "peer_ns", "parent_ns"):
        if key in step and step[key] not in live:
            return str(step[key])
    return None


def _call_of(world: World, step: Step, resolve: Resolve) -> Callable[[], Any]:
    op, k = step["op"], world.kernel
    if op == "set_vf":
        pf = resolve(world, HOST, step["pf"])
        vf_changes = VFChanges(**step["changes"])
        return lambda: k.set_vf(world.host, pf, step["vf"], vf_changes)
    label = step["ns"]
    ns = world.ref(label)
    if op == "create":
        spec = _spec(world, step, resolve)
        return lambda: k.create_link(ns, spec)
    index = resolve(world, label, step["link"])
    if op == "delete":
        return lambda: k.delete_link(ns, index)
    if op == "move":
        target = world.ref(step["to"])
        return lambda: k.move_link(ns, index, target, new_name=step.get("new_name"))
    if op == "set":
        changes = dict(step["changes"])
        if "master" in changes:
            master = changes["master"]
            changes["master"] = 0 if master == "" else resolve(world, label, master)
        link_changes = LinkChanges(**changes)
        return lambda: k.set_link(ns, index, link_changes)
    if op == "options":
        fields = {key: v for key, v in step.items() if key not in ("op", "ns", "link")}
        if "active_slave" in fields:
            slave = fields["active_slave"]
            fields["active_slave"] = 0 if slave == "" else resolve(world, label, slave)
        options = LinkOptions(**fields)
        return lambda: k.set_link_options(ns, index, options)
    raise ValueError(f"unknown op {op!r} in step {step}")


def _spec(world: World, step: Step, resolve: Resolve) -> LinkSpec:
    kind = step["kind"]
    parent = parent_ns = None
    if "parent" in step:
        where = str(step.get("parent_ns", step["ns"]))
        parent = resolve(world, where, step["parent"])
        parent_ns = world.ref(where) if where != step["ns"] else None
    bond = None
    if kind == "bond":
        bond = BondInfo(
            step.get("bond_mode", "active-backup"),
            step.get("miimon", 100),
            fail_over_mac=step.get("fail_over_mac", "none"),
        )
    peer_ns = world.ref(step["peer_ns"]) if "peer_ns" in step else None
    return LinkSpec(
        kind=kind,
        name=step["name"],
        mac=step.get("mac"),
        mtu=step.get("mtu"),
        parent=parent,
        parent_ns=parent_ns,
        bond=bond,
        vlan_id=step.get("vlan_id"),
        mode=step.get("mode"),
        peer_name=step.get("peer"),
        peer_ns=peer_ns,
        ifindex=step.get("ifindex"),
        ipvlan_flag=step.get("ipvlan_flag"),
    )


def replay(world: World, steps: list[Step]) -> None:
    """A regression scenario's body: the steps, then the whole state (VF tables and
    permanent addresses too) in the log, so the corpus compares what the run did."""
    for step in steps:
        run_step(world, step)
    world.log.append({"call": "observe (full)", "ok": world.observe(full=True)})


# -- comparing two worlds ------------------------------------------------------------------


_NAMING = re.compile(r" \((name|template|no name)\)$")


@dataclass(frozen=True)
class Signature:
    """What a divergence is, to tell distinct ones apart and to match a known one: the
    op (with the kind it creates or the field it sets), and either the two outcomes or
    the classes of state that differ."""

    op: str
    aspect: str  # "outcome" or "state"
    detail: tuple[str, ...]  # ("fake EINVAL", "linux ok") or the sorted field classes

    def matched_by(self, known: Signature) -> bool:
        """A known divergence explains this one: same op and aspect, and the same
        outcomes, or state classes among the known ones."""
        if self.aspect != known.aspect:
            return False
        if self.aspect == "outcome":
            return (self.op, self.detail) == (known.op, known.detail)
        # how a create named its link does not change what its state shows
        same_op = _NAMING.sub("", self.op) == _NAMING.sub("", known.op)
        return same_op and set(self.detail) <= set(known.detail)

    def __str__(self) -> str:
        return f"{self.op}: {self.aspect} {', '.join(self.detail)}"


def op_class(step: Step) -> str:
    """The op and what distinguishes its behaviour most: the kind a create makes (and
    whether its name is fixed, a template or none), the fields a set changes."""
    op = step["op"]
    if op == "create":
        name = step["name"]
        how = "no name" if name == "" else "template" if "%" in name else "name"
        return f"create {step['kind']} ({how})"
    if op in ("set", "set_vf"):
        return f"{op} {'+'.join(sorted(step['changes']))}"
    if op == "options":
        fields = sorted(k for k in step if k not in ("op", "ns", "link", "kind"))
        return f"options {step['kind']} {'+'.join(fields)}"
    return str(op)


# The address of a virtual link: the guest's udev rewrites a new virtual link's random
# address to one derived from its name (MACAddressPolicy=persistent), a moment after
# it is made, so two links made under the same name at different times share it; the
# model has no udev. Told apart from a device's "mac" so that it can be tolerated.
VIRTUAL_MAC = "mac (virtual link)"


def udev_only(sig: Signature) -> bool:
    """A state divergence the lab's udev explains, not the kernel
    (docs/generated-differential.md): in virtual links' addresses alone, or in addresses
    right after ``numvfs`` (udev gives new VFs persistent addresses, which the model
    applies at once, and is late under load)."""
    if sig.aspect != "state":
        return False
    if set(sig.detail) == {VIRTUAL_MAC}:
        return True
    return sig.op == "numvfs" and set(sig.detail) <= ADDRESS_CLASSES


# A device's addresses: what igbvf changes on its own between two steps. After its PF
# resets (an MTU change, going up or down, sriov_numvfs), a VF's watchdog finds the
# reset in its mailbox and schedules its own reset, at least 10 s after its last one
# (igbvf_has_link -> reset_task), which takes the address the PF has for it as its
# address and permanent address and programs it into the PF's VF table; and udev may
# give a new VF its address late. When that lands depends on time, which the model
# has none of.
DEVICE_ADDRESS_CLASSES = frozenset({"mac", "perm_mac", "device.perm_mac", "vf.mac"})
ADDRESS_CLASSES = DEVICE_ADDRESS_CLASSES | {VIRTUAL_MAC}


def vf_address_timing(sig: Signature) -> bool:
    """A state divergence in devices' addresses alone (see DEVICE_ADDRESS_CLASSES): counted
    in the figures, never failing a session. The corpus's SR-IOV address scenarios,
    which wait out or avoid those moments, check the addresses deterministically."""
    classes = set(sig.detail)
    # a permanent address counts as "perm_mac" on every link, and as "device.perm_mac"
    # too on a device: one without the other is a virtual link's
    devices_only = "perm_mac" not in classes or "device.perm_mac" in classes
    return sig.aspect == "state" and classes <= DEVICE_ADDRESS_CLASSES and devices_only


def field_classes(fake: dict[str, Any], real: dict[str, Any]) -> set[str]:
    """Which classes of the whole state differ between two full observations: a link
    present on one side only ("link set"), a link field ("mtu", "bond.active_slave",
    "device.perm_mac", ...), a namespace ("namespaces"), a VF table ("vf.table") or a
    VF table entry's field ("vf.mac", "vf.vlan", ...)."""
    out: set[str] = set()
    links_f, links_r = fake["links"], real["links"]
    for label in set(links_f) | set(links_r):
        if label not in links_f or label not in links_r:
            out.add("namespaces")
            continue
        rows_f = {row["name"]: row for row in links_f[label]}
        rows_r = {row["name"]: row for row in links_r[label]}
        if rows_f.keys() != rows_r.keys():
            out.add("link set")
        for name in rows_f.keys() & rows_r.keys():
            a, b = rows_f[name], rows_r[name]
            for key in set(a) | set(b):
                va, vb = a.get(key), b.get(key)
                if va == vb:
                    continue
                if isinstance(va, dict) and isinstance(vb, dict):
                    out |= {f"{key}.{s}" for s in set(va) | set(vb) if va.get(s) != vb.get(s)}
                elif key == "mac" and a.get("kind") != "device":
                    out.add(VIRTUAL_MAC)
                else:
                    out.add(key)
    vfs_f, vfs_r = fake["vfs"], real["vfs"]
    for pf in set(vfs_f) | set(vfs_r):
        ta, tb = vfs_f.get(pf, []), vfs_r.get(pf, [])
        if len(ta) != len(tb):
            out.add("vf.table")
        for ea, eb in zip(ta, tb, strict=False):
            out |= {f"vf.{key}" for key in set(ea) | set(eb) if ea.get(key) != eb.get(key)}
    return out


def signature_of(
    step: Step, outcomes: tuple[str, str], views: tuple[dict[str, Any], dict[str, Any]]
) -> Signature | None:
    """The divergence of one step (fake first), or None when both agree."""
    fake_outcome, real_outcome = outcomes
    if fake_outcome != real_outcome:
        return Signature(
            op_class(step), "outcome", (f"fake {fake_outcome}", f"linux {real_outcome}")
        )
    if views[0] != views[1]:
        return Signature(op_class(step), "state", tuple(sorted(field_classes(*views))))
    return None


def kinds_of(steps: list[Step]) -> list[str]:
    """The link kinds a regression scenario declares: always "device" (it came from the
    VM lab and may touch its PFs: it needs them, so it runs in the vm tier only)."""
    made = {str(s["kind"]) for s in steps if s["op"] == "create"}
    return ["device", *sorted(made - {"device"})]
