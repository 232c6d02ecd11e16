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

import errno
import json
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from fakekernel import FakeKernelModel
from plugins.kernel import Kernel, KernelError, Link, LinkChanges, LinkSpec, NsRef
from plugins.kernel.linux import LinuxKernel
from plugins.kernel.linux import _wire as wire
from plugins.kernel.linux._decode import decode_link_msg, decode_nsid
from plugins.kernel.linux._nsfs import open_netns, run_in_netns
from plugins.kernel.linux.netns import create_namespace, delete_namespace
from plugins.sdk import NamespaceHandle

HOST = "host"
MISSING_IFINDEX = 0x7FFFFF00  # what ``ifindex`` gives for a link that is not there
LIVE_RENAME_SINCE = (6, 2)  # dev_change_name lets an UP link be renamed since Linux 6.2
NAMESPACE_DEATH_DEADLINE_S = 10.0

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
        self._refs: dict[str, NsRef] = {}  # live namespaces by label, creation order
        self._dead: list[tuple[str, NsRef]] = []  # killed namespaces, for labels in the log
        # MAC tokens for the whole run, so that an address that comes back (a released
        # bond slave's, a passthru lower's) gets the token it had before
        self._macs: dict[str, str] = {}

    # -- namespaces ------------------------------------------------------------------------

    @property
    def host(self) -> NsRef:
        return self._refs[HOST]

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

    def move(self, ns: NsRef, name: str, target: NsRef, new_name: str | None = None) -> Outcome:
        index = self.ifindex(ns, name)
        dest = f"{self.label_of(target)}:{new_name or name}"
        return self.attempt(
            lambda: self.kernel.move_link(ns, index, target, new_name=new_name),
            f"move {self.label_of(ns)}:{name} -> {dest}",
        )

    def delete(self, ns: NsRef, name: str) -> Outcome:
        index = self.ifindex(ns, name)
        return self.attempt(
            lambda: self.kernel.delete_link(ns, index), f"delete {self.label_of(ns)}:{name}"
        )

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

    def observe(self) -> dict[str, Any]:
        """Every live namespace of this world: its links, normalized and sorted by name."""
        dumps = {
            label: {lk.ifindex: lk for lk in self.kernel.list_links(ref)}
            for label, ref in self._refs.items()
        }
        macs = self._macs

        def mac_token(mac: str) -> str:
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
                rows.append(
                    {
                        "name": lk.name,
                        "kind": lk.kind,
                        "mtu": lk.mtu,
                        "min_mtu": lk.min_mtu,
                        "max_mtu": lk.max_mtu,
                        "up": lk.up,
                        "mac": mac_token(lk.mac),
                        "master": name_in(label, lk.master),
                        "parent": parent,
                        "peer": peer,
                        "alias": lk.alias,
                        "vlan_id": lk.vlan_id,
                        "vlan_protocol": lk.vlan_protocol,
                        "mode": lk.mode,
                        "bond": bond,
                    }
                )
            out[label] = rows
        return out


def _is_loopback(value: Any) -> bool:
    return isinstance(value, Link) and value.name == "lo"


def dumps(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True)


# -- the fake kernel ---------------------------------------------------------------------


class FakeWorld(World):
    """The scenario on a fresh FakeKernelModel (in process, deterministic)."""

    backend = "fake"

    def __init__(self, *, live_rename: bool) -> None:
        super().__init__()
        self.model = FakeKernelModel(live_rename=live_rename)
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

    def observe(self) -> dict[str, Any]:
        snap = self.model.snapshot()["links"]
        by_id = {row["id"]: row for row in snap}
        labels = {ref.path: label for label, ref in self._refs.items()}
        self._peers = {}
        for row in snap:
            if row["peer"] is not None and row["ns"] in labels:
                peer = by_id[row["peer"]]
                where = (labels[row["ns"]], row["ifindex"])
                self._peers[where] = (labels.get(peer["ns"], "?"), peer["ifindex"])
        return super().observe()

    def _peer_of(self, label: str, link: Link) -> tuple[str, int] | None:
        return self._peers.get((label, link.ifindex))


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

    def observe(self) -> dict[str, Any]:
        self._peers = self._veth_peers()
        return super().observe()

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
                    msg = decode_link_msg(chunk)
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
