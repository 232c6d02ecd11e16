"""The netns tier's lab: the running kernel, in network namespaces of the lab's own.

Nothing of the machine's own is touched. A ``NetnsLab`` pins every namespace it makes
under a private directory (``/run/dranp-lab-XXXXXXXX``, the random part repeated in
the names of its two fixed namespaces, so labs running at once never share a name):

- ``node-XXXXXXXX``: the node. Its services take it as their host namespace
  (``kernel_url`` is ``linux://`` naming its pin), and it holds the parent devices a
  node would have, ``enp3s0f0``..``enp3s0f2``: veth ends, up, MTU 1500, usable as
  macvlan parents.
- ``wire-XXXXXXXX``: the far end of each parent (``swp0``.., up), what a switch port
  is to a NIC. The peers live here rather than in the node so the node holds only what
  a node has (a scan of it, or a plugin picking a parent, never meets lab plumbing),
  while a frame sent out of a parent still reaches somewhere a test can look.
- the namespaces a test adds (``add_namespace``: the pods), pinned by the name given,
  so ``lab.sandbox("pod-a")`` finds ``.../pod-a`` as on the fake tiers.

``kernel`` (a ``NetnsKernel``) is the ``Kernel`` protocol through a ``LinuxKernel`` on
the node namespace, plus what a test needs: named namespaces, deleting one and waiting
until it is gone, and a ``snapshot()`` in the fake kernel's JSON shape over the lab's
namespaces only, so ``fakekernel.model.diff`` and ``harness.invariants`` read it
unchanged.

The Linux backend (``plugins.kernel.linux``, which loads all of pyroute2: most of a
second) is imported when a lab is built, not with this module: ``import labs`` runs
in every service process the kit's crash launcher starts, on every tier.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import re
import select
import socket
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fakekernel import LabKernel
from fakekernel.lab import plant_pod_interface
from plugins.kernel import (
    ForwardingKernel,
    Kernel,
    KernelError,
    Link,
    LinkChanges,
    LinkSpec,
    NsRef,
    kernel_error,
)
from plugins.sdk import NamespaceHandle

from ._lab import Lab
from ._seed import start_state_seed

if TYPE_CHECKING:
    from plugins.kernel.linux import LinuxKernel

PIN_ROOT = Path("/run")  # root-only tmpfs, seen by the service processes the lab starts
PIN_PREFIX = "dranp-lab-"
PARENTS = ("enp3s0f0", "enp3s0f1", "enp3s0f2")
PARENT_MTU = 1500
PARENT_MTUS = (1500, 9000)  # what a randomized parent draws from (a child of 1500 fits)
log = logging.getLogger(__name__)
# How long a deleted namespace may take to die (cleanup_net runs on a workqueue).
NAMESPACE_DEATH_DEADLINE_S = 10.0
# dev_change_name lets an UP link be renamed since Linux 6.2 (the fake's ``live_rename``).
LIVE_RENAME_SINCE = (6, 2)
RTMGRP_LINK = 0x1  # the rtnetlink multicast group of link events (RTM_NEWLINK/DELLINK)
DEATH_MARKER = "zz-lab-gone"  # the dying namespace's end of the veth watched for its death

# Fields of the fake kernel's snapshot that real Linux does not report over netlink;
# they are always None here, so snapshots of this lab compare among themselves:
# - mac_assign: addr_assign_type is only in sysfs, which shows the namespace sysfs was
#   mounted in, never a lab namespace;
# - br_mtu_set_by_user (a bridge option), saved (what a bond keeps to give back to a
#   released slave), passthru_perm_mac (a macvlan port's saved address) and
#   ipvlan_port_mode are kernel-internal state with no netlink attribute.
NOT_REPORTED_BY_LINUX = (
    "br_mtu_set_by_user",
    "ipvlan_port_mode",
    "mac_assign",
    "passthru_perm_mac",
    "saved",
)


class NetnsLabUnavailable(RuntimeError):
    """The netns lab cannot run on this machine; the message says what is missing."""


def missing() -> str | None:
    """Why a ``NetnsLab`` cannot run here, in one line (None: it may; building it probes
    the kernel modules)."""
    if os.geteuid() != 0:
        return "NetnsLab needs root (to create network namespaces and links)"
    if not os.path.exists("/proc/self/ns/net"):
        return "NetnsLab needs a kernel with network namespaces (no /proc/self/ns/net)"
    return None


class NetnsKernel(ForwardingKernel):
    """The ``Kernel`` protocol through a ``LinuxKernel`` on the lab's node namespace
    (``linux``, every call forwarded), plus the lab's named namespaces and its snapshot.

    ``list_namespaces`` (what a service's node-wide scan sees in this process) looks in
    the lab's pin directory only, never at the machine's mounts or processes.
    """

    def __init__(self, directory: Path, node: NamespaceHandle, wire: NamespaceHandle) -> None:
        from plugins.kernel.linux import LinuxKernel

        self.linux: LinuxKernel = LinuxKernel(node, namespace_dirs=(directory,), proc_dir=None)
        super().__init__(self.linux)
        self.directory = directory
        try:
            self.wire = self.open_namespace(wire)
        except BaseException:
            self.close()
            raise
        self._fixed = {_name_of(node.path): self.host_namespace(), _name_of(wire.path): self.wire}
        self._added: dict[str, NsRef] = {}  # by name, in creation order
        self._deaths = 0
        self.death_deadline_s = NAMESPACE_DEATH_DEADLINE_S
        # The lab this kernel belongs to: a caller holding only ``lab.kernel`` keeps the
        # lab, and so its pins, alive (they go when the lab is collected).
        self.owner: object = None

    def close(self) -> None:
        """Close the descriptors and sockets held (the pins are the lab's to delete)."""
        self.linux.close()

    # -- named namespaces --------------------------------------------------------------------

    def add_namespace(self, name: str) -> NsRef:
        """A new namespace pinned at ``<lab dir>/name`` (EEXIST if the name is taken)."""
        from plugins.kernel.linux.netns import create_namespace, delete_namespace

        handle = create_namespace(self.directory, name)
        try:
            ref = self.open_namespace(handle)
        except BaseException:
            delete_namespace(handle.path, missing_ok=True)
            raise
        self._added[name] = ref
        return ref

    def namespace(self, name: str) -> NsRef:
        ref = self._added.get(name) or self._fixed.get(name)
        if ref is None:
            raise kernel_error(errno.ENOENT, f"no namespace named {name!r} in this lab")
        return ref

    def namespaces(self) -> list[NsRef]:
        """The node (the services' host) first, the wire, then the added ones in order."""
        return [*self._fixed.values(), *self._added.values()]

    def delete_namespace(self, name: str) -> None:
        """``ip netns del`` of an added namespace, returning once it is dead.

        Dead means its links are gone: the kernel tears a namespace down when the last
        reference goes, and a veth planted from it into the wire dies in the same
        batch. Anything still holding it keeps it alive (a process in it, or a call of
        a service's ``LinuxKernel`` still in progress: between calls it holds none but
        its host), and then this fails with ETIMEDOUT.
        """
        from plugins.kernel.linux.netns import delete_namespace

        if name in self._fixed:
            raise kernel_error(errno.EPERM, f"{name!r} is the lab's own; close() deletes it")
        ref = self.namespace(name)
        self._deaths += 1
        witness = f"gone{self._deaths}"
        with _link_events(self.wire.path) as events:
            self.create_link(
                ref, LinkSpec(kind="veth", name=DEATH_MARKER, peer_name=witness, peer_ns=self.wire)
            )
            delete_namespace(ref.path)
            del self._added[name]
            self.linux.release_namespace(ref)  # this kernel's own descriptor and socket of it
            deadline = time.monotonic() + self.death_deadline_s
            while self.get_link(self.wire, name=witness) is not None:
                if not events.wait(deadline - time.monotonic()):
                    raise kernel_error(
                        errno.ETIMEDOUT,
                        f"namespace {name!r} still alive {self.death_deadline_s:g} s "
                        "after its pin was removed: something still holds it",
                    )

    # -- the snapshot ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The fake kernel's snapshot shape (``fakekernel._snapshot``), of the lab's
        namespaces only, ``lo`` left out as the fake does.

        A link's ``id`` is ``"<namespace path>#<ifindex>"``: Linux has no identity that
        survives a move, so a link moved and brought back to its ifindex compares equal,
        and one that moved shows as removed here and added there. ``parent``, ``peer``,
        ``master`` and a bond's ``slaves``/``active`` are such ids. A relation to a
        namespace outside the lab is ``"netnsid:<id>#<ifindex>"`` (the id as seen from
        the link). Bond slaves are listed by ifindex (Linux does not report the enslave
        order). Fields Linux does not report are None (``NOT_REPORTED_BY_LINUX``).
        """
        spaces = self.namespaces()
        host = self.host_namespace()
        links = {ref.path: self.list_links(ref) for ref in spaces}
        peers = _veth_peers_across(spaces)
        rows = []
        for ref in spaces:
            here = links[ref.path]
            for link in here:
                if link.name == "lo":
                    continue
                peer = None
                if link.kind == "veth" and link.peer is not None:
                    where, index = peers.get((ref.path, link.ifindex), (ref.path, link.peer))
                    peer = _link_id(where, index)
                rows.append(_row(ref.path, link, here, peer))
        return {
            "boot_id": self.boot_id(),
            "live_rename": _release() >= LIVE_RENAME_SINCE,
            "namespaces": [
                {
                    # "" names the host namespace, as in the fake kernel's snapshot
                    "path": ref.path,
                    "name": "" if ref == host else _name_of(ref.path),
                    "device": ref.device,
                    "inode": ref.inode,
                }
                for ref in spaces
            ],
            "links": rows,
            "pfs": self._pf_tables(spaces, links),
        }

    def _pf_tables(self, spaces: list[NsRef], links: dict[str, list[Link]]) -> list[dict[str, Any]]:
        """The VF tables of the PFs in the lab's namespaces, as the fake's ``pfs`` (an
        administrator's change through a PF shows nowhere else: the conformance suite's
        external change on the sriov target). Capabilities are the fake's alone: []."""
        pfs = []
        for ref in spaces:
            for link in links[ref.path]:
                if link.kind != "device" or link.pci_address is None or link.vf_of is not None:
                    continue
                vfs = self.get_vfs(ref, link.ifindex)
                if vfs:
                    table = [vf.to_json() for vf in vfs]
                    pfs.append({"pci": link.pci_address, "capabilities": [], "vfs": table})
        return sorted(pfs, key=lambda pf: str(pf["pci"]))


class NetnsLab(Lab):
    """The running kernel in namespaces of the lab's own (root; veth and macvlan).

    ``parents``: the node's parent devices (veth ends, up, MTU 1500). ``randomize``:
    start from a random state of the seed instead, as the fake labs do, in what a real
    kernel allows here: each parent's MTU, MAC and admin state, and a foreign veth pair
    in the node (``fveth0``/``fveth1``, alias ``foreign``); the pod's own interface is
    random on every lab (``furnish_sandbox``). Raises ``NetnsLabUnavailable`` (one
    line) when the machine cannot run it.
    """

    tier = "netns"

    def __init__(
        self,
        *,
        start_seed: int | None = None,
        parents: Sequence[str] = PARENTS,
        pin_root: Path = PIN_ROOT,
        randomize: bool = False,
        furnish_node: Callable[[NetnsKernel], None] | None = None,
    ) -> None:
        problem = missing()
        if problem is not None:
            raise NetnsLabUnavailable(problem)
        from plugins.kernel.linux.netns import create_namespace

        self.start_seed = start_state_seed() if start_seed is None else start_seed
        self.directory = Path(tempfile.mkdtemp(prefix=PIN_PREFIX, dir=pin_root))
        suffix = self.directory.name.removeprefix(PIN_PREFIX)
        # Runs once: from close(), or at interpreter exit for a lab nobody closed.
        self._unpin = weakref.finalize(self, _remove_pins, self.directory)
        self._kernel: NetnsKernel | None = None
        try:
            with _cannot_run_without("network namespaces"):
                node = create_namespace(self.directory, f"node-{suffix}")
                wire = create_namespace(self.directory, f"wire-{suffix}")
            self._kernel = NetnsKernel(self.directory, node, wire)
            self._kernel.owner = self
            if furnish_node is not None:
                furnish_node(self._kernel)
            self.parents = [self._cable(i, name) for i, name in enumerate(parents)]
            if self.parents:
                self._probe_macvlan()
            if randomize:
                self._randomize()
        except BaseException:
            self.close()
            raise

    def _cable(self, index: int, name: str) -> Link:
        """Parent ``name`` in the node, its peer ``swp<index>`` in the wire, both up."""
        k = self.kernel
        spec = LinkSpec(
            kind="veth", name=name, mtu=PARENT_MTU, peer_name=f"swp{index}", peer_ns=k.wire
        )
        with _cannot_run_without("the veth kernel module", errno.EOPNOTSUPP):
            parent = k.create_link(k.host_namespace(), spec)
        assert parent.peer is not None  # a veth always reports its peer
        k.set_link(k.wire, parent.peer, LinkChanges(up=True))
        return k.set_link(k.host_namespace(), parent.ifindex, LinkChanges(up=True))

    def _randomize(self) -> None:
        """Each parent's MTU, MAC and admin state, and a foreign veth pair, from the seed
        (each from its own stream, so adding a parent changes no other's state)."""
        k = self.kernel
        host = k.host_namespace()
        for i, parent in enumerate(self.parents):
            rng = random.Random(f"{self.start_seed}/{parent.name}")
            changes = LinkChanges(
                mtu=rng.choice(PARENT_MTUS), mac=_random_mac(rng), up=rng.random() < 0.5
            )
            self.parents[i] = k.set_link(host, parent.ifindex, changes)
            log.info("netns lab seed %d: %s starts %s", self.start_seed, parent.name, changes)
        rng = random.Random(f"{self.start_seed}/foreign")
        spec = LinkSpec(
            kind="veth",
            name="fveth0",
            peer_name="fveth1",
            mtu=rng.choice(PARENT_MTUS),
            mac=_random_mac(rng),
            alias="foreign",
        )
        foreign = k.create_link(host, spec)
        if rng.random() < 0.5:
            k.set_link(host, foreign.ifindex, LinkChanges(up=True))
        log.info("netns lab seed %d: foreign %s", self.start_seed, spec)

    def _probe_macvlan(self) -> None:
        """Fail here, in one line, rather than deep inside a service's first macvlan."""
        k = self.kernel
        port = k.get_link(k.wire, name="swp0")
        assert port is not None
        spec = LinkSpec(kind="macvlan", name="probe0", parent=port.ifindex, mode="bridge")
        with _cannot_run_without("the macvlan kernel module", errno.EOPNOTSUPP):
            probe = k.create_link(k.wire, spec)
        k.delete_link(k.wire, probe.ifindex)

    @property
    def kernel(self) -> NetnsKernel:
        assert self._kernel is not None, "this NetnsLab is closed"
        return self._kernel

    @property
    def kernel_url(self) -> str:
        """What makes a service process take the node namespace as its host."""
        return f"linux://{self.kernel.host_namespace().path}"

    def furnish_sandbox(self, ns: NsRef) -> None:
        """The pod's own ``eth0``, its peer in the node, as the fake labs plant it."""
        plant_pod_interface(self.kernel, ns, self.start_seed)

    def close(self) -> None:
        """Let go of every namespace and delete every pin the lab made (idempotent).

        The namespaces die once nothing else holds them; a service process of the lab
        must be stopped first (``Node.close`` does).
        """
        if self._kernel is not None:
            self._kernel.close()
        self._unpin()


# -- helpers -------------------------------------------------------------------------------


@contextlib.contextmanager
def _cannot_run_without(what: str, *codes: int) -> Iterator[None]:
    """A kernel refusal (one with ``codes``, if given) becomes the one-line reason the
    lab cannot run; any other error passes as it is."""
    try:
        yield
    except KernelError as exc:
        if codes and exc.code not in codes:
            raise
        raise NetnsLabUnavailable(f"NetnsLab needs {what} ({exc})") from exc


def _remove_pins(directory: Path) -> None:
    """Unmount and remove every pin under ``directory``, then the directory.

    Every pin is tried even when one fails; the first failure is raised afterwards, so
    a namespace left behind is never silent.
    """
    from plugins.kernel.linux.netns import delete_namespace

    failures: list[OSError] = []
    with contextlib.suppress(FileNotFoundError):
        for entry in sorted(directory.iterdir()):
            try:
                delete_namespace(entry, missing_ok=True)
            except OSError as exc:
                failures.append(exc)
        directory.rmdir()
    if failures:
        raise failures[0]


def _random_mac(rng: random.Random) -> str:
    """A unicast, locally administered address."""
    octets = [rng.randrange(256) for _ in range(6)]
    octets[0] = (octets[0] & 0xFC) | 0x02
    return ":".join(f"{o:02x}" for o in octets)


def _name_of(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _link_id(ns_path: str, ifindex: int) -> str:
    return f"{ns_path}#{ifindex}"


def _release() -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", os.uname().release)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _row(ns_path: str, link: Link, here: list[Link], peer: str | None) -> dict[str, Any]:
    """One link as the fake kernel's snapshot has it (keys sorted the same way)."""
    parent = None
    if link.parent is not None:
        parent = _link_id(link.parent_ns.path if link.parent_ns else ns_path, link.parent)
    bond = None
    if link.bond is not None:
        slaves = sorted(s.ifindex for s in here if s.master == link.ifindex)
        active = link.bond.active_slave
        bond = {
            "mode": link.bond.mode,
            "miimon_ms": link.bond.miimon_ms,
            "updelay_ms": link.bond.updelay_ms,
            "downdelay_ms": link.bond.downdelay_ms,
            "slaves": [_link_id(ns_path, s) for s in slaves],
            "active": None if active is None else _link_id(ns_path, active),
        }
        if link.bond.fail_over_mac != "none":  # as the fake's snapshot: only when set
            bond["fail_over_mac"] = link.bond.fail_over_mac
    row: dict[str, Any] = {
        "id": _link_id(ns_path, link.ifindex),
        "ifindex": link.ifindex,
        "name": link.name,
        "kind": link.kind,
        "ns": ns_path,
        "mac": link.mac,
        "mtu": link.mtu,
        "min_mtu": link.min_mtu,
        "max_mtu": link.max_mtu,
        "up": link.up,
        "master": None if link.master is None else _link_id(ns_path, link.master),
        "parent": parent,
        "peer": peer,
        "alias": link.alias,
        "perm_mac": link.perm_mac,
        "pci_address": link.pci_address,
        "vf_of": list(link.vf_of) if link.vf_of else None,
        "bond": bond,
        "vlan_id": link.vlan_id,
        "vlan_protocol": link.vlan_protocol,
        "mode": link.mode,
        **dict.fromkeys(NOT_REPORTED_BY_LINUX),
    }
    if link.ipvlan_flag is not None:  # the fake's snapshot has it on the lower (its port)
        row["ipvlan_flag"] = link.ipvlan_flag
    return dict(sorted(row.items()))


def _veth_peers_across(spaces: list[NsRef]) -> dict[tuple[str, int], tuple[str, int]]:
    """(namespace path, ifindex) of each link whose IFLA_LINK is in another namespace ->
    where that is: (namespace path, ifindex), the path "netnsid:<id>" outside the lab.

    ``Link.peer`` is an ifindex in the peer's namespace, which ``Link`` does not name
    (``LinuxKernel`` resolves the netnsid of parents only); ifindexes are per namespace,
    so pairing veths by ifindex alone can pick the wrong one. This asks each namespace
    for IFLA_LINK_NETNSID and maps the ids back with RTM_GETNSID, through pyroute2.
    """
    from pyroute2 import IPRoute

    from plugins.kernel.linux.netns import run_in_netns

    with contextlib.ExitStack() as stack:
        fds: dict[str, int] = {}
        routes: dict[str, Any] = {}
        for ref in spaces:
            fd = os.open(ref.path, os.O_RDONLY | os.O_CLOEXEC)
            stack.callback(os.close, fd)
            fds[ref.path] = fd
            sock = run_in_netns(fd, _rtnl_socket, cleanup=socket.socket.close)
            stack.callback(sock.close)
            routes[ref.path] = stack.enter_context(IPRoute(use_socket=sock))
        remote: dict[tuple[str, int], tuple[int, int]] = {}  # -> (netnsid, ifindex there)
        for path, route in routes.items():
            for msg in route.link("dump"):
                nsid, index = msg.get_attr("IFLA_LINK_NETNSID"), msg.get_attr("IFLA_LINK")
                if nsid is not None and index is not None:
                    remote[(path, int(msg["index"]))] = (int(nsid), int(index))
        seen_as: dict[tuple[str, int], str] = {}  # (from namespace, netnsid) -> path
        for path in {p for p, _ in remote}:
            for other, fd in fds.items():
                if other != path:
                    answer = routes[path].get_netnsid(fd=fd)
                    if answer is not None and answer["nsid"] is not None:
                        seen_as[(path, int(answer["nsid"]))] = other
        return {
            (path, ifindex): (seen_as.get((path, nsid), f"netnsid:{nsid}"), index)
            for (path, ifindex), (nsid, index) in remote.items()
        }


def _rtnl_socket() -> socket.socket:
    return socket.socket(
        socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE
    )


class _LinkEvents:
    """A socket subscribed to a namespace's link events: ``wait`` blocks until the next
    one (True) or the timeout (False), so a condition on links is re-checked when they
    change, never on a timer."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def wait(self, timeout: float) -> bool:
        if timeout <= 0:
            return False
        readable, _, _ = select.select([self.sock], [], [], timeout)
        if not readable:
            return False
        while True:  # drain: one wake-up per batch of events is enough
            try:
                self.sock.recv(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return True
            except OSError as exc:  # ENOBUFS: events were dropped; still a change
                if exc.errno != errno.ENOBUFS:
                    raise


@contextlib.contextmanager
def _link_events(ns_path: str) -> Iterator[_LinkEvents]:
    """Link events of the namespace pinned at ``ns_path``, from now on."""
    from plugins.kernel.linux.netns import run_in_netns

    fd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        sock = run_in_netns(fd, _rtnl_socket, cleanup=socket.socket.close)
    finally:
        os.close(fd)
    with sock:
        sock.bind((0, RTMGRP_LINK))
        yield _LinkEvents(sock)


def _is_a_lab_kernel(k: NetnsKernel) -> tuple[Kernel, LabKernel]:
    """mypy checks here that NetnsKernel is a Kernel and a LabKernel."""
    return k, k
