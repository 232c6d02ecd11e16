"""A tiny scenario DSL that runs the same calls on the fake kernel and on real Linux.

A scenario is a function ``(world) -> None``. It creates namespaces with
``world.ns(label)``, makes kernel calls through ``world.attempt`` (or the shortcuts
``create``/``set``/``move``/``delete`` built on it), and may kill namespaces with
``world.kill_ns(label)``. Every attempt appends its normalized outcome to
``world.log``; afterwards ``world.observe()`` gives a normalized picture of every
namespace the world created (and its host). Two backends give equal logs and equal
observations exactly when they behave the same for what the scenario did.

Normalization (see docs/fake-kernel-fidelity.md for why each is needed):

* namespaces are named by their labels ("host", "a", "b"), never by inode or path;
* ifindexes are left out; relations (master, parent, veth peer, bond active slave)
  are given by name, with the namespace label where it may differ;
* MAC addresses are replaced by tokens ("mac1", "mac2", ...) given in order of first
  appearance over the whole run (checkpoints included), so only equality between
  addresses, also at different times, is compared (random addresses differ from
  run to run, and between the fake and Linux);
* ``lo`` is left out (the fake does not model loopback).
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import json
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import fakekernel
from fakekernel import FakeKernelModel
from fakekernel.lab import build_model, parse_lab_yaml
from labs.vm import GuestSide, VmKernel
from plugins.kernel import (
    BondInfo,
    Kernel,
    KernelError,
    Link,
    LinkChanges,
    LinkSpec,
    NsRef,
    VFChanges,
    VFConfig,
    kernel_error,
)
from plugins.kernel.linux import LinuxKernel
from plugins.kernel.linux import _wire as wire
from plugins.kernel.linux._decode import decode_link, decode_nsid
from plugins.kernel.linux._nsfs import open_netns, run_in_netns
from plugins.kernel.linux.netns import create_namespace, delete_namespace
from plugins.sdk import NamespaceHandle

HOST = "host"
MISSING_IFINDEX = 0x7FFFFF00  # what ``ifindex`` gives for a link that is not there
LIVE_RENAME_SINCE = (6, 2)  # dev_change_name lets an UP link be renamed since Linux 6.2
# igb answers a VF made while its PF is up at once (NicProfile.vf_probe_answered): so
# on 6.12, not on 6.1 (igb_sriov_reinit resets the PF after enabling the VFs); the
# releases between were not measured, so the first series known to do it is the bound.
VF_PROBE_ANSWERED_SINCE = (6, 12)
NAMESPACE_DEATH_DEADLINE_S = 10.0
# How long a bond's link monitor may take to fail over (miimon 100 ms; TCG is slow).
BOND_FAILOVER_DEADLINE_S = 2.0
# How long a PF's port may take to have link again after a reset (QEMU's igb: 500 ms).
PORT_LINK_DEADLINE_S = 3.0
# The VF settings the PF's driver sets only with its port's link (igb: rates).
PORT_LINK_VF_CHANGES = frozenset({"min_tx_rate", "max_tx_rate"})

Outcome = tuple[Literal["ok"], Any] | tuple[Literal["errno"], str]


def errno_name(code: int) -> str:
    # errno.errorcode keeps only one name for 95; the kernel's is EOPNOTSUPP.
    return "EOPNOTSUPP" if code == errno.EOPNOTSUPP else errno.errorcode.get(code, str(code))


def kernel_release() -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def running_kernel_has_live_rename() -> bool:
    """Whether the running kernel renames an UP link (6.2+); the fake is set up to match."""
    return kernel_release() >= LIVE_RENAME_SINCE


class World:
    """Namespaces by label, the kernel calls' outcome log, and the normalized picture."""

    backend = "abstract"
    kernel: Kernel

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        # from the last observe(): label -> link name -> ifindex, and -> kind
        self.last_ifindex: dict[str, dict[str, int]] = {}
        self.last_kind: dict[str, dict[str, str]] = {}
        self._refs: dict[str, NsRef] = {}  # live namespaces by label, creation order
        self._dead: list[tuple[str, NsRef]] = []  # killed namespaces, for labels in the log
        # MAC tokens for the whole run, so that an address that comes back (a released
        # bond slave's, a passthru lower's) gets the token it had before
        self._macs: dict[str, str] = {}

    # -- namespaces ------------------------------------------------------------------------

    @property
    def host(self) -> NsRef:
        return self._refs[HOST]

    def labels(self) -> list[str]:
        """The live namespaces' labels, host first, then in creation order."""
        return list(self._refs)

    def ref(self, label: str) -> NsRef:
        """The live namespace labelled ``label``."""
        return self._refs[label]

    def ns(self, label: str) -> NsRef:
        """Create a new namespace labelled ``label`` (the label may be reused after a kill)."""
        if label in self._refs:
            raise ValueError(f"namespace {label!r} already exists in this world")
        ref = self._new_namespace(label)
        self._refs[label] = ref
        return ref

    def kill_ns(self, label: str) -> None:
        """Delete the namespace's mount and let it die; returns once it is gone."""
        if label == HOST or label not in self._refs:
            raise ValueError(f"cannot kill namespace {label!r}")
        ref = self._refs.pop(label)
        self._dead.append((label, ref))
        self._kill(label, ref)

    def handle(self, label: str) -> NamespaceHandle:
        """The NamespaceHandle a coordinator would pass for this namespace."""
        raise NotImplementedError

    def _new_namespace(self, label: str) -> NsRef:
        raise NotImplementedError

    def _kill(self, label: str, ref: NsRef) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release everything the world holds (real namespaces are deleted)."""

    # -- calls -----------------------------------------------------------------------------

    def attempt(self, fn: Callable[[], Any], what: str = "") -> Outcome:
        """Run one kernel call; record and return ("ok", result) or ("errno", name)."""
        try:
            result = fn()
        except KernelError as exc:
            outcome: Outcome = ("errno", errno_name(exc.code))
            self.log.append({"call": what or f"#{len(self.log)}", "errno": outcome[1]})
            return outcome
        self.log.append({"call": what or f"#{len(self.log)}", "ok": self._summary(result)})
        return ("ok", result)

    def checkpoint(self, what: str) -> None:
        """Record the whole normalized picture in the log, to compare a state mid-scenario."""
        self.log.append({"call": f"observe: {what}", "ok": self.observe()})

    def ifindex(self, ns: NsRef, name: str) -> int:
        """The ifindex of ``name`` in ``ns`` (not logged); an unused number if absent."""
        try:
            found = self.kernel.get_link(ns, name=name)
        except KernelError:
            return MISSING_IFINDEX
        return MISSING_IFINDEX if found is None else found.ifindex

    def create(self, ns: NsRef, spec: LinkSpec) -> Outcome:
        where = self.label_of(ns)
        return self.attempt(
            lambda: self.kernel.create_link(ns, spec), f"create {spec.kind} {where}:{spec.name}"
        )

    def set(self, ns: NsRef, link: str, /, **changes: Any) -> Outcome:
        """set_link on the link named ``link``; ``master`` may be given by name."""
        index = self.ifindex(ns, link)
        what = ", ".join(f"{k}={v!r}" for k, v in changes.items())
        if "master" in changes and isinstance(changes["master"], str):
            changes["master"] = self.ifindex(ns, changes["master"])
        return self.attempt(
            lambda: self.kernel.set_link(ns, index, LinkChanges(**changes)),
            f"set {self.label_of(ns)}:{link} {what}",
        )

    def move(
        self,
        ns: NsRef,
        name: str,
        target: NsRef,
        new_name: str | None = None,
        alias: str | None = None,
    ) -> Outcome:
        index = self.ifindex(ns, name)
        dest = f"{self.label_of(target)}:{new_name or name}"
        if alias is not None:
            dest += f" alias={alias[:40]!r}"
        return self.attempt(
            lambda: self.kernel.move_link(ns, index, target, new_name=new_name, alias=alias),
            f"move {self.label_of(ns)}:{name} -> {dest}",
        )

    def delete(self, ns: NsRef, name: str) -> Outcome:
        index = self.ifindex(ns, name)
        return self.attempt(
            lambda: self.kernel.delete_link(ns, index), f"delete {self.label_of(ns)}:{name}"
        )

    def move_renumbers(
        self, ns: NsRef, name: str, target: NsRef, new_name: str | None = None
    ) -> Outcome:
        """Move ``name`` and log whether it kept its ifindex in ``target`` (Linux keeps it
        unless another link there has it: __dev_change_net_namespace's "ifindex
        conflict"), or the move's errno."""
        before = self.ifindex(ns, name)
        dest = f"{self.label_of(target)}:{new_name or name}"

        def moved() -> str:
            link = self.kernel.move_link(ns, before, target, new_name=new_name)
            return "kept its ifindex" if link.ifindex == before else "renumbered"

        return self.attempt(moved, f"move {self.label_of(ns)}:{name} -> {dest} (ifindex)")

    def get(self, ns: NsRef, name: str) -> Outcome:
        return self.attempt(
            lambda: self.kernel.get_link(ns, name=name), f"get {self.label_of(ns)}:{name}"
        )

    # -- beyond the Kernel protocol: SR-IOV and link options ------------------------------

    def numvfs(self, pf: str, count: int) -> Outcome:
        """Write ``count`` to the host PF ``pf``'s ``sriov_numvfs`` (as it is: no detour
        through 0); the result is the new VFs' netdev names ([] when none were made)."""
        return self.attempt(lambda: self._write_numvfs(pf, count), f"sriov_numvfs {pf}={count}")

    def vfs(self, pf: str) -> Outcome:
        """The PF's VF table (IFLA_VFINFO_LIST), as the PF reports it."""
        index = self.ifindex(self.host, pf)
        return self.attempt(lambda: self.kernel.get_vfs(self.host, index), f"get_vfs {pf}")

    def set_vf(self, pf: str, vf: int, /, **changes: Any) -> Outcome:
        index = self.ifindex(self.host, pf)
        what = ", ".join(f"{k}={v!r}" for k, v in changes.items())
        if PORT_LINK_VF_CHANGES & changes.keys():
            self.settle_port(pf)
        return self.attempt(
            lambda: self.kernel.set_vf(self.host, index, vf, VFChanges(**changes)),
            f"set_vf {pf} vf {vf} {what}",
        )

    def change(self, ns: NsRef, link: str, option: str, value: object) -> Outcome:
        """Change an option of an existing link (``ip link set LINK type KIND OPTION
        VALUE``): bond.mode, bond.miimon, bond.active_slave (a name), ipvlan.mode, vlan.id."""
        return self.attempt(
            lambda: self._change_link(ns, link, option, str(value)),
            f"change {self.label_of(ns)}:{link} {option}={value}",
        )

    def await_active(self, ns: NsRef, bond: str, avoid: str) -> Outcome:
        """The bond's active slave ("": none) once it is not ``avoid`` (the link monitor
        fails over in its own time), or at a deadline: what it settled on."""
        return self.attempt(
            lambda: self._await_active(ns, bond, avoid),
            f"active slave of {self.label_of(ns)}:{bond} (not {avoid or 'none'})",
        )

    def _write_numvfs(self, pf: str, count: int) -> list[str]:
        raise kernel_error(errno.ENODEV, f"{pf}: no SR-IOV PF in this world")

    def settle_port(self, pf: str) -> None:
        """Before a VF rate call, which asks for the PF port's link: wait until the port
        has its link back after the PF's last reset, where that takes time (the model
        gives link at once)."""

    def _change_link(self, ns: NsRef, link: str, option: str, value: str) -> None:
        raise NotImplementedError

    def _await_active(self, ns: NsRef, bond: str, avoid: str) -> str:
        raise NotImplementedError

    # -- normalization ---------------------------------------------------------------------

    def label_of(self, ref: NsRef | None) -> str:
        if ref is None:
            return "?"
        for label, known in self._refs.items():
            if (known.device, known.inode) == (ref.device, ref.inode):
                return label
        for label, known in self._dead:
            if (known.device, known.inode) == (ref.device, ref.inode):
                return f"{label} (dead)"
        return "?"

    def _summary(self, result: Any) -> Any:
        """A backend-independent form of a call's result, for the log."""
        if isinstance(result, Link):
            return {
                "ns": self.label_of(result.ns),
                "name": result.name,
                "kind": result.kind,
                "mtu": result.mtu,
                "up": result.up,
                "alias": result.alias,
                "mode": result.mode,
                "vlan": result.vlan_id,
            }
        if isinstance(result, NsRef):
            return self.label_of(result)
        if isinstance(result, list) and result and all(isinstance(r, VFConfig) for r in result):
            return [r.to_json() for r in result]
        if isinstance(result, list) and result and all(isinstance(r, NsRef) for r in result):
            # list_namespaces: the order (host first, then by mount path) is compared too
            return [self.label_of(r) for r in result if not self.hidden(r)]
        if isinstance(result, list):
            # list_links is in ifindex order, and ifindexes are not compared
            rows = [self._summary(r) for r in result if not _is_loopback(r)]
            return sorted(rows, key=lambda r: r["name"] if isinstance(r, dict) else str(r))
        return result

    def _peer_of(self, label: str, link: Link) -> tuple[str, int] | None:
        """(namespace label, ifindex) of a veth's peer."""
        raise NotImplementedError

    def hidden(self, ref: NsRef) -> bool:
        """A namespace of the backend's own machinery, left out of what is compared."""
        return False

    def _dump(self) -> dict[str, dict[int, Link]]:
        """The links of every live namespace of this world, by label and ifindex."""
        return {
            label: {lk.ifindex: lk for lk in self.kernel.list_links(ref)}
            for label, ref in self._refs.items()
        }

    def observe(self, *, full: bool = False) -> dict[str, Any]:
        """Every live namespace of this world: its links, normalized and sorted by name.

        ``full`` (the generated runs, tests/differential/generated.py): every field the
        protocol reports, the permanent address of every link (not only of devices), and
        the PFs' VF tables: ``{"links": <as without full>, "vfs": {pf: [entry, ...]}}``,
        each MAC address named by where it first appears in this observation.
        Either way the links' ifindexes by name are kept in ``last_ifindex``, so a caller
        that observes after every call resolves names without a round trip.
        """
        dumps = self._dump()
        self.last_ifindex = {
            label: {lk.name: index for index, lk in links.items()} for label, links in dumps.items()
        }
        self.last_kind = {
            label: {lk.name: lk.kind for lk in links.values()} for label, links in dumps.items()
        }
        # A full observation (one per step) names an address by where it first appears
        # in this observation ("=host:d0 mac"), not by a number over the run: the guest's
        # udev gives a new virtual link its persistent address a moment after creation
        # (MACAddressPolicy), which the model does not, and with numbers that one
        # difference would renumber every address after it, here and at every later step.
        macs: dict[str, str] = {} if full else self._macs

        def mac_token(mac: str, where: str) -> str:
            if full:
                return macs.setdefault(mac, f"={where}")
            return macs.setdefault(mac, f"mac{len(macs) + 1}")

        def name_in(label: str, ifindex: int | None) -> str | None:
            if ifindex is None:
                return None
            found = dumps.get(label, {}).get(ifindex)
            return found.name if found is not None else f"?{ifindex}"

        out: dict[str, Any] = {}
        for label, links in dumps.items():
            rows = []
            for lk in sorted(links.values(), key=lambda x: x.name):
                if _is_loopback(lk):
                    continue
                parent = None
                if lk.parent is not None:
                    where = label if lk.parent_ns is None else self.label_of(lk.parent_ns)
                    parent = f"{where}:{name_in(where, lk.parent)}"
                peer = None
                if lk.kind == "veth" and lk.peer is not None:
                    found = self._peer_of(label, lk)
                    peer = "?" if found is None else f"{found[0]}:{name_in(*found)}"
                bond = None
                if lk.bond is not None:
                    bond = {
                        "mode": lk.bond.mode,
                        "miimon_ms": lk.bond.miimon_ms,
                        "updelay_ms": lk.bond.updelay_ms,
                        "downdelay_ms": lk.bond.downdelay_ms,
                        "active_slave": name_in(label, lk.bond.active_slave),
                    }
                device = None
                if lk.kind == "device":
                    # a PCI netdev: its identity, and the permanent address (a VF's may
                    # follow what its PF set, depending on the driver)
                    device = {
                        "pci": lk.pci_address,
                        "vf_of": list(lk.vf_of) if lk.vf_of else None,
                        "perm_mac": None
                        if lk.perm_mac is None
                        else mac_token(lk.perm_mac, f"{label}:{lk.name} perm"),
                    }
                rows.append(
                    {
                        "name": lk.name,
                        "kind": lk.kind,
                        "mtu": lk.mtu,
                        "min_mtu": lk.min_mtu,
                        "max_mtu": lk.max_mtu,
                        "up": lk.up,
                        "mac": mac_token(lk.mac, f"{label}:{lk.name} mac"),
                        "master": name_in(label, lk.master),
                        "parent": parent,
                        "peer": peer,
                        "alias": lk.alias,
                        "vlan_id": lk.vlan_id,
                        "vlan_protocol": lk.vlan_protocol,
                        "mode": lk.mode,
                        "bond": bond,
                        **({"device": device} if device is not None else {}),
                    }
                )
                if full:
                    perm = lk.perm_mac
                    where = f"{label}:{lk.name} perm"
                    rows[-1]["perm_mac"] = None if perm is None else mac_token(perm, where)
                    # what the protocol reports since issue 30 (added fields)
                    rows[-1]["ipvlan_flag"] = lk.ipvlan_flag
                    if bond is not None and lk.bond is not None:
                        bond["fail_over_mac"] = lk.bond.fail_over_mac
            out[label] = rows
        if not full:
            return out
        tables = {
            pf: [
                {
                    **vf.to_json(),
                    "mac": None if vf.mac is None else mac_token(vf.mac, f"{pf} vf {vf.vf_index}"),
                }
                for vf in sorted(vfs, key=lambda vf: vf.vf_index)
            ]
            for pf, vfs in sorted(self._vf_tables(dumps).items())
        }
        return {"links": out, "vfs": tables}

    def _vf_tables(self, dumps: dict[str, dict[int, Link]]) -> dict[str, list[VFConfig]]:
        """The VF table of every PF in the host namespace that has VFs, by PF name."""
        out: dict[str, list[VFConfig]] = {}
        for index, lk in dumps.get(HOST, {}).items():
            if lk.kind == "device" and lk.pci_address is not None and lk.vf_of is None:
                if lk.name == "lo":
                    continue
                table = self.kernel.get_vfs(self.host, index)
                if table:
                    out[lk.name] = table
        return out


def _is_loopback(value: Any) -> bool:
    return isinstance(value, Link) and value.name == "lo"


def dumps(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True)


# -- the fake kernel ---------------------------------------------------------------------


class FakeWorld(World):
    """The scenario on a fresh FakeKernelModel (in process, deterministic)."""

    backend = "fake"

    def __init__(self, *, live_rename: bool, model: FakeKernelModel | None = None) -> None:
        super().__init__()
        self.model = model or FakeKernelModel(live_rename=live_rename, loopback=True)
        self.kernel = self.model
        self._refs[HOST] = self.model.host_namespace()
        self._peers: dict[tuple[str, int], tuple[str, int]] = {}

    def _new_namespace(self, label: str) -> NsRef:
        return self.model.add_namespace(label)

    def _kill(self, label: str, ref: NsRef) -> None:
        self.model.delete_namespace(label)

    def handle(self, label: str) -> NamespaceHandle:
        ref = self._refs[label]
        return NamespaceHandle(ref.path, ref.device, ref.inode, ref.boot_id)

    def observe(self, *, full: bool = False) -> dict[str, Any]:
        snap = self.model.snapshot()["links"]
        by_id = {row["id"]: row for row in snap}
        labels = {ref.path: label for label, ref in self._refs.items()}
        self._peers = {}
        for row in snap:
            if row["peer"] is not None and row["ns"] in labels:
                peer = by_id[row["peer"]]
                where = (labels[row["ns"]], row["ifindex"])
                self._peers[where] = (labels.get(peer["ns"], "?"), peer["ifindex"])
        return super().observe(full=full)

    def _peer_of(self, label: str, link: Link) -> tuple[str, int] | None:
        return self._peers.get((label, link.ifindex))

    def _write_numvfs(self, pf: str, count: int) -> list[str]:
        return self.model.set_sriov_numvfs(pf, count)

    def _change_link(self, ns: NsRef, link: str, option: str, value: str) -> None:
        self.model.change_link(ns, link, option, value)

    def _await_active(self, ns: NsRef, bond: str, avoid: str) -> str:
        return self.model.bond_active_slave(ns, bond)


# -- real Linux --------------------------------------------------------------------------


def _new_rtnl_socket() -> socket.socket:
    return socket.socket(
        socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE
    )


class LinuxWorld(World):
    """The scenario on the running kernel, in namespaces created under ``directory``.

    The approved host namespace is a fresh namespace labelled "host" (never the
    machine's own). A hidden "watch" namespace (not observed) lets ``kill_ns`` wait
    until a namespace has really been torn down: before the kill, a veth is made from
    the dying namespace into it, and the kill is over when its end there is gone
    (cleanup_net unregisters all of a namespace's links in one batch).
    """

    backend = "linux"

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self._dir = directory
        self._handles: dict[str, NamespaceHandle] = {}
        self._made: list[str] = []  # every path created, for close()
        host = self._create("host")
        # list_namespaces sees the world's directory only: not the machine's own mounts,
        # nor its processes' namespaces (the fake has no processes).
        self.lk = LinuxKernel(host, namespace_dirs=(directory,), proc_dir=None)
        self.kernel = self.lk
        self._handles[HOST] = host
        self._refs[HOST] = self.lk.host_namespace()
        self._watch: NsRef | None = None
        self._peers: dict[tuple[str, int], tuple[str, int]] = {}
        self._kills = 0

    def _create(self, name: str) -> NamespaceHandle:
        handle = create_namespace(self._dir, name)
        self._made.append(handle.path)
        return handle

    def _new_namespace(self, label: str) -> NsRef:
        path = self._dir / label
        if path.exists():  # a label reused after kill_ns
            delete_namespace(path, missing_ok=True)
        handle = self._create(label)
        self._handles[label] = handle
        return self.lk.open_namespace(handle)

    def handle(self, label: str) -> NamespaceHandle:
        return self._handles[label]

    def _kill(self, label: str, ref: NsRef) -> None:
        if self._watch is None:
            self._watch = self.lk.open_namespace(self._create("zz-watch"))
        self._kills += 1
        marker = f"zzkill{self._kills}"
        self.lk.create_link(
            ref, LinkSpec(kind="veth", name="zzkill", peer_name=marker, peer_ns=self._watch)
        )
        delete_namespace(self._handles.pop(label).path)
        # The next call drops the kernel's descriptor and socket of the namespace (its
        # mount is gone); nothing else holds it, so the kernel tears it down.
        deadline = time.monotonic() + NAMESPACE_DEATH_DEADLINE_S
        while self.lk.get_link(self._watch, name=marker) is not None:
            if time.monotonic() > deadline:
                raise AssertionError(f"namespace {label} still alive after the deadline")
            time.sleep(0.005)

    def close(self) -> None:
        self.lk.close()
        for path in self._made:
            delete_namespace(path, missing_ok=True)

    def observe(self, *, full: bool = False) -> dict[str, Any]:
        self._peers = self._veth_peers()
        return super().observe(full=full)

    def _change_link(self, ns: NsRef, link: str, option: str, value: str) -> None:
        GuestSide("").change_link(ns.path, link, option, value)

    def _await_active(self, ns: NsRef, bond: str, avoid: str) -> str:
        return GuestSide("").await_bond_active(ns.path, bond, avoid, BOND_FAILOVER_DEADLINE_S)

    def hidden(self, ref: NsRef) -> bool:
        watch = self._watch
        return watch is not None and (ref.device, ref.inode) == (watch.device, watch.inode)

    def _peer_of(self, label: str, link: Link) -> tuple[str, int] | None:
        if link.peer is None:
            return None
        return self._peers.get((label, link.ifindex), (label, link.peer))

    def _veth_peers(self) -> dict[tuple[str, int], tuple[str, int]]:
        """Veth peers in another namespace: IFLA_LINK_NETNSID, mapped back with RTM_GETNSID.

        ``Link.peer`` is an ifindex in the peer's namespace, which ``Link`` does not
        name; ifindexes are per namespace, so the namespace is needed to find the peer.
        """
        opened: dict[str, tuple[int, wire.RtnlSocket]] = {}
        try:
            for label in self._refs:
                fd, _ = open_netns(self._handles[label].path)
                raw = run_in_netns(fd, _new_rtnl_socket, cleanup=socket.socket.close)
                opened[label] = (fd, wire.RtnlSocket(raw))
            remote: dict[tuple[str, int], tuple[int, int]] = {}  # -> (nsid, peer ifindex)
            body = wire.ifinfomsg() + wire.nla_u32(wire.IFLA_EXT_MASK, wire.RTEXT_FILTER_SKIP_STATS)
            for label, (_, sock) in opened.items():
                for chunk in sock.request(wire.RTM_GETLINK, wire.NLM_F_DUMP, body):
                    msg = decode_link(chunk)
                    nsid = msg.get_attr("IFLA_LINK_NETNSID")
                    link = msg.get_attr("IFLA_LINK")
                    if nsid is not None and link is not None:
                        remote[(label, int(msg["index"]))] = (int(nsid), int(link))
            names: dict[tuple[str, int], str] = {}  # (seen from, nsid) -> label
            for label, (_, sock) in opened.items():
                for other, (other_fd, _) in opened.items():
                    if other == label:
                        continue
                    query = wire.rtgenmsg() + wire.nla_u32(wire.NETNSA_FD, other_fd)
                    replies = sock.request(wire.RTM_GETNSID, 0, query)
                    nsid = decode_nsid(replies[0]) if replies else None
                    if nsid is not None:
                        names[(label, nsid)] = other
            return {
                key: (names.get((key[0], nsid), "?"), peer) for key, (nsid, peer) in remote.items()
            }
        finally:
            for fd, sock in opened.values():
                sock.close()
                os.close(fd)


# -- the VM lab's guest kernel -----------------------------------------------------------


class VmWorld(World):
    """The scenario on the VM lab's guest kernel, through its kernel agent.

    The host is the guest's root namespace (the lab's node), where its igb PFs are;
    the fake it is compared with models them (``fakekernel/labs/vm-igb.yaml``). Every
    other namespace is added in the guest under a name unique to this world
    (``<prefix><label>``; a label reused after ``kill_ns`` gets its old name back, so
    the path names a new namespace, as on the other backends). ``close`` deletes them
    and puts the node back as ``baseline`` has it (links made there deleted, the PFs'
    settings and VF counts restored), then checks that it is.
    """

    backend = "vm"

    def __init__(self, kernel: VmKernel, baseline: GuestBaseline, *, sriov: bool = True) -> None:
        super().__init__()
        self.sriov = sriov  # whether the scenario may touch the PFs' VFs
        self.vm = kernel
        self.kernel = kernel
        self.baseline = baseline
        self.prefix = f"dx{uuid.uuid4().hex[:6]}-"
        self._refs[HOST] = kernel.host_namespace()
        self._names: dict[str, str] = {}
        self._peers: dict[tuple[str, int], tuple[str, int]] = {}
        self._pf_rows: list[dict[str, Any]] = []  # the last snapshot's VF tables

    def _new_namespace(self, label: str) -> NsRef:
        name = self._names.setdefault(label, f"{self.prefix}{label}")
        return self.vm.add_namespace(name)

    def _kill(self, label: str, ref: NsRef) -> None:
        self.vm.delete_namespace(self._names[label])

    def handle(self, label: str) -> NamespaceHandle:
        ref = self._refs[label]
        return NamespaceHandle(ref.path, ref.device, ref.inode, ref.boot_id)

    def hidden(self, ref: NsRef) -> bool:
        return self.label_of(ref) == "?"  # the lab's own (its wire), or another test's

    def _write_numvfs(self, pf: str, count: int) -> list[str]:
        return self.vm.write_sriov_numvfs(pf, count)

    def _change_link(self, ns: NsRef, link: str, option: str, value: str) -> None:
        self.vm.change_link(ns, link, option, value)

    def _await_active(self, ns: NsRef, bond: str, avoid: str) -> str:
        return self.vm.await_bond_active(ns, bond, avoid, BOND_FAILOVER_DEADLINE_S)

    def settle_port(self, pf: str) -> None:
        # QEMU's igb restarts its emulated autonegotiation at each PF reset (open, close,
        # MTU, sriov_numvfs): no link status for 500 ms, VF rates refused meanwhile. The
        # outcome is whatever the call answers after the wait, link or not.
        self.vm.await_port_link(pf, PORT_LINK_DEADLINE_S)

    def _dump(self) -> dict[str, dict[int, Link]]:
        """One snapshot (one round trip) instead of a dump per namespace; veth peers
        come with it."""
        snap = self.vm.snapshot()
        rows = snap["links"]
        self._pf_rows = snap.get("pfs", [])
        by_path = {ref.path: (label, ref) for label, ref in self._refs.items()}
        out: dict[str, dict[int, Link]] = {label: {} for label in self._refs}
        self._peers = {}
        for row in rows:
            if row["ns"] not in by_path:
                continue
            label, ref = by_path[row["ns"]]
            link = _link_of_row(row, ref, by_path)
            out[label][link.ifindex] = link
            if row["peer"] is not None:
                path, index = _split_id(row["peer"])
                self._peers[(label, link.ifindex)] = (by_path.get(path, ("?", ref))[0], index)
        return out

    def _peer_of(self, label: str, link: Link) -> tuple[str, int] | None:
        return self._peers.get((label, link.ifindex))

    def _vf_tables(self, dumps: dict[str, dict[int, Link]]) -> dict[str, list[VFConfig]]:
        """From the snapshot ``_dump`` took (its ``pfs``): no round trip of its own."""
        pf_names = {str(lk.pci_address): lk.name for lk in dumps.get(HOST, {}).values()}
        return {
            pf_names.get(pf["pci"], pf["pci"]): [VFConfig(**vf) for vf in pf["vfs"]]
            for pf in self._pf_rows
            if pf["vfs"]
        }

    def _restore_loopback(self) -> None:
        """The node's lo as it booted (the snapshot and ``guest_state`` leave lo out, so
        a change to it would outlive the world unseen). Its ifindex is 1."""
        host = self.vm.host_namespace()
        if _loopback_state(self.vm.get_link(host, ifindex=1)) == LOOPBACK:
            return
        self.vm.set_link(host, 1, LinkChanges(master=0))
        self.vm.set_link(host, 1, LinkChanges(name="lo", mtu=65536, alias="", up=True))
        found = _loopback_state(self.vm.get_link(host, ifindex=1))
        if found != LOOPBACK:
            raise AssertionError(f"the node's lo is {found}, not {LOOPBACK}, after a reset")

    def close(self) -> None:
        """Delete the world's namespaces, put the node back, and check it is as found."""
        problems: list[str] = []
        for label in [label for label in self._refs if label != HOST]:
            try:
                self.vm.delete_namespace(self._names[label])
            except KernelError as exc:
                problems.append(f"deleting namespace {label}: {exc}")
            del self._refs[label]
        self._restore_loopback()
        found = self.baseline.state
        if not self.sriov:
            found = {k: v for k, v in found.items() if k != "numvfs"}
        now = guest_state(self.vm, sriov=self.sriov)
        if now != found:
            restore_guest(self.vm, self.baseline)
            now = guest_state(self.vm, sriov=self.sriov)
        if now != found:
            problems.append("the guest is not as found:\n" + "\n".join(_state_diff(found, now)))
        if problems:
            raise AssertionError("; ".join(problems))


LOOPBACK = ("lo", 65536, True, None, None)  # name, MTU, up, alias, master at boot


def _loopback_state(link: Link | None) -> tuple[Any, ...] | None:
    if link is None:
        return None
    return (link.name, link.mtu, link.up, link.alias, link.master)


def _split_id(link_id: str) -> tuple[str, int]:
    path, _, index = link_id.rpartition("#")
    return path, int(index)


def _link_of_row(row: dict[str, Any], ref: NsRef, by_path: dict[str, tuple[str, NsRef]]) -> Link:
    """A ``Link`` from a row of the agent's snapshot (``labs.netns`` shape)."""
    parent = parent_ns = None
    if row["parent"] is not None:
        path, parent = _split_id(row["parent"])
        if path != row["ns"]:
            parent_ns = by_path[path][1] if path in by_path else NsRef(0, 0, "", path)
    bond = None
    if row["bond"] is not None:
        b = row["bond"]
        active = None if b["active"] is None else _split_id(b["active"])[1]
        bond = BondInfo(
            b["mode"],
            b["miimon_ms"],
            b["updelay_ms"],
            b["downdelay_ms"],
            active,
            fail_over_mac=b.get("fail_over_mac", "none"),
        )
    return Link(
        ifindex=row["ifindex"],
        name=row["name"],
        kind=row["kind"],
        ns=ref,
        mac=row["mac"],
        mtu=row["mtu"],
        up=row["up"],
        min_mtu=row["min_mtu"],
        max_mtu=row["max_mtu"],
        master=None if row["master"] is None else _split_id(row["master"])[1],
        parent=parent,
        parent_ns=parent_ns,
        alias=row["alias"],
        perm_mac=row["perm_mac"],
        pci_address=row["pci_address"],
        vf_of=(row["vf_of"][0], row["vf_of"][1]) if row["vf_of"] else None,
        bond=bond,
        vlan_id=row["vlan_id"],
        vlan_protocol=row["vlan_protocol"],
        mode=row["mode"],
        peer=None if row["peer"] is None else _split_id(row["peer"])[1],
        ipvlan_flag=row.get("ipvlan_flag"),
    )


# The guest's PFs (labs.vm.PFS) and the lab file the fake models them with.
GUEST_PFS = ("enp1s0", "enp2s0")
VM_LAB = Path(fakekernel.__file__).parent / "labs" / "vm-igb.yaml"


def vm_like_model(
    *,
    live_rename: bool,
    vf_probe_answered: bool = False,
    nic: Mapping[str, Any] | None = None,
) -> FakeKernelModel:
    """The fake kernel of the VM lab's guest: its igb PFs (``VM_LAB``); what differs
    between its kernel releases given here (``GuestBaseline.model`` reads them off the
    guest's release); ``nic``: overrides of the PFs' NIC profile (a lab's ``nics``
    keys, e.g. ``{"vf_mailbox": False}`` for a mutant of the model)."""
    desc = dict(parse_lab_yaml(VM_LAB.read_text(), str(VM_LAB)), live_rename=live_rename)
    overrides = dict(nic or {})
    if vf_probe_answered:
        overrides["vf_probe_answered"] = True
    if overrides:
        variant = "igb-of-this-release"
        desc["nics"] = {**(desc.get("nics") or {}), variant: {"driver": "igb", **overrides}}
        desc["pfs"] = [{**pf, "nic": variant} for pf in desc["pfs"]]
    return build_model(desc, str(VM_LAB))


def guest_state(kernel: VmKernel, *, sriov: bool = True) -> dict[str, Any]:
    """The node's links (without ifindexes; ``lo`` left out) and the lab's namespaces,
    from one snapshot; with ``sriov`` the PFs' VF counts too (a scenario that uses no
    PF cannot change them: two round trips saved)."""
    snap = kernel.snapshot()
    node = kernel.host_namespace().path
    keys = ("name", "kind", "mtu", "up", "mac", "alias", "master", "pci_address")
    links = sorted(
        ({k: row[k] for k in keys} for row in snap["links"] if row["ns"] == node),
        key=lambda row: str(row["name"]),
    )
    for row in links:  # a relation by id names an ifindex: whether there is one suffices
        row["master"] = row["master"] is not None
    state: dict[str, Any] = {
        "links": links,
        "namespaces": sorted(ns["path"] for ns in snap["namespaces"]),
    }
    if sriov:
        state["numvfs"] = {pf: kernel.sriov(pf)["numvfs"] for pf in GUEST_PFS}
    return state


def _state_diff(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return list(
        difflib.unified_diff(
            dumps(before).splitlines(), dumps(after).splitlines(), "found", "left", lineterm=""
        )
    )


class GuestBaseline:
    """The guest as the corpus found it: what every scenario must leave it as."""

    def __init__(self, kernel: VmKernel) -> None:
        self.release = kernel.release()
        self.state = guest_state(kernel)
        host = kernel.host_namespace()
        self.devices = {
            lk.pci_address: lk for lk in kernel.list_links(host) if lk.pci_address is not None
        }
        self.devices_by_name = {lk.name: lk for lk in self.devices.values()}

    @property
    def series(self) -> tuple[int, int]:
        match = re.match(r"(\d+)\.(\d+)", self.release)
        return (int(match.group(1)), int(match.group(2))) if match else (0, 0)

    @property
    def live_rename(self) -> bool:
        return self.series >= LIVE_RENAME_SINCE

    @property
    def vf_probe_answered(self) -> bool:
        return self.series >= VF_PROBE_ANSWERED_SINCE

    def model(self) -> FakeKernelModel:
        """A fresh fake kernel of this guest, for its kernel release."""
        return vm_like_model(live_rename=self.live_rename, vf_probe_answered=self.vf_probe_answered)

    def fake_world(self) -> FakeWorld:
        return FakeWorld(live_rename=self.live_rename, model=self.model())


def restore_guest(kernel: VmKernel, baseline: GuestBaseline) -> None:
    """Put the node back: the PFs' VF counts (VFs a scenario made are removed, which also
    resets the PF's VF table), links made in the node deleted, the devices' settings."""
    for pf, count in baseline.state["numvfs"].items():
        if kernel.sriov(pf)["numvfs"] != count:
            kernel.set_sriov_numvfs(pf, count)
    host = kernel.host_namespace()
    for link in kernel.list_links(host):
        if link.pci_address is None and link.name != "lo":
            with contextlib.suppress(KernelError):  # gone with another one already
                kernel.delete_link(host, link.ifindex)
    for link in kernel.list_links(host):
        was = baseline.devices.get(link.pci_address or "")
        if was is None or link.name == "lo":
            continue
        if (link.name, link.mtu, link.mac, link.alias, link.up, link.master) == (
            was.name,
            was.mtu,
            was.mac,
            was.alias,
            was.up,
            was.master,
        ):
            continue
        changes = LinkChanges(
            name=was.name if was.name != link.name else None,
            mtu=was.mtu,
            mac=was.mac,
            alias=was.alias or "",
            master=0 if link.master is not None else None,
        )
        kernel.set_link(host, link.ifindex, LinkChanges(up=False))
        kernel.set_link(host, link.ifindex, changes)
        if was.up:
            kernel.set_link(host, link.ifindex, LinkChanges(up=True))
