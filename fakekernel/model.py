"""FakeKernelModel: a deterministic in-memory Linux networking stack behind ``Kernel``.

The rules live in the private modules next to this one (``_links``, ``_dev``,
``_bonding``, ``_vfs``); this class resolves namespaces and ifindexes, calls them,
and converts internal state to the ``Link`` values a netlink dump would show.
Admin methods (namespaces, devices, PFs, snapshots) stand in for what the node
and its hardware provide outside the kernel interface.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
from collections.abc import Iterable, Iterator
from typing import Any, cast

from plugins.kernel import (
    BondInfo,
    Kernel,
    Link,
    LinkChanges,
    LinkKind,
    LinkOptions,
    LinkSpec,
    NsRef,
    VFChanges,
    VFConfig,
)
from plugins.sdk import NamespaceHandle

from . import _bonding, _links, _vfs
from ._checks import claim_name, name_policy, parse_mac
from ._nics import NicProfile, derived_mac, profile, vf_pci
from ._snapshot import diff, snapshot
from ._state import LinkState, Namespace, PfState, State, VfState, fail

__all__ = ["DEFAULT_BOOT_ID", "FakeKernelModel", "diff"]

DEFAULT_BOOT_ID = "00000000-0000-4000-8000-000000000001"
MAC_ADDRESS_POLICIES = ("none", "persistent")
NETNS_DIR = "/run/netns"

# ``_view`` fills a Link's __dict__ with every field at once, which is what a frozen
# dataclass's __init__ ends with after one object.__setattr__ per field: 9.8 us a link
# that way, most of a set_link or find_device, and the rig's crash runs view ~115 links
# each. Only while Link stays a plain frozen dataclass (no slots, no __post_init__).
_LINK_FIELDS = frozenset(f.name for f in dataclasses.fields(Link))
assert not hasattr(Link, "__slots__")
assert not hasattr(Link, "__post_init__")


class FakeKernelModel:
    """Implements the ``Kernel`` protocol in memory; not thread-safe (the server locks)."""

    def __init__(
        self,
        boot_id: str = DEFAULT_BOOT_ID,
        *,
        host_path: str = "/proc/1/ns/net",
        live_rename: bool = False,
        loopback: bool = False,
        mac_address_policy: str = "none",
    ) -> None:
        """``loopback``: every namespace has its ``lo`` (ifindex 1, kind "device", MTU
        65536), as on Linux; off, the model leaves it out (what labs built before it
        expect: a scan of the host's devices does not meet it).

        ``mac_address_policy``: what the node's udev does to a new VF netdev whose driver
        made its address up (systemd.link's MACAddressPolicy=): "none" leaves it (the
        kernel alone: a fresh address each time, also its permanent address);
        "persistent" (Debian's 99-default.link) gives it an address derived from its
        name, the same each time a VF of that index is made, which the VF driver then
        also takes as its hardware address (the permanent address stays the made-up one)."""
        if mac_address_policy not in MAC_ADDRESS_POLICIES:
            raise ValueError(
                f"mac_address_policy {mac_address_policy!r}: one of {MAC_ADDRESS_POLICIES}"
            )
        self._s = State(
            boot_id=boot_id,
            host_path=host_path,
            live_rename=live_rename,
            loopback=loopback,
            mac_address_policy=mac_address_policy,
        )
        self._s.new_namespace("", host_path)

    # -- Kernel: namespaces ----------------------------------------------------------------

    def boot_id(self) -> str:
        return self._s.boot_id

    def host_namespace(self) -> NsRef:
        return self._s.host.ref

    def open_namespace(self, handle: NamespaceHandle) -> NsRef:
        ns = next((n for n in self._s.namespaces.values() if n.ref.path == handle.path), None)
        if ns is None:
            raise fail(errno.ENOENT, f"{handle.path} does not exist")
        if (handle.device, handle.inode, handle.boot_id) != ns.ref.key:
            raise fail(errno.ESTALE, f"{handle.path} now names a different namespace")
        return ns.ref

    def list_namespaces(self) -> list[NsRef]:
        """The host, then every other namespace by mount path (as LinuxKernel orders one
        directory: by name). The model has no processes, so every other namespace is a
        mount under /run/netns."""
        host = self._s.host.ref
        others = [ns.ref for ns in self._s.namespaces.values() if ns.ref != host]
        return [host, *sorted(others, key=lambda ref: ref.path)]

    # -- Kernel: links ---------------------------------------------------------------------

    def list_links(self, ns: NsRef) -> list[Link]:
        inode = self._ns(ns).ref.inode
        links = [lk for lk in self._s.links.values() if lk.ns == inode]
        return [self._view(lk) for lk in self._sorted(links)]

    def get_link(
        self, ns: NsRef, *, name: str | None = None, ifindex: int | None = None
    ) -> Link | None:
        if (name is None) == (ifindex is None):
            raise fail(errno.EINVAL, "get_link needs exactly one of name and ifindex")
        inode = self._ns(ns).ref.inode
        if name is not None:
            link = self._s.by_name(inode, name)
        else:
            link = self._s.in_ns(inode, ifindex or 0)
        return None if link is None else self._view(link)

    def find_device(self, pci_address: str) -> Link | None:
        pci = pci_address.lower()
        link = next((lk for lk in self._s.links.values() if lk.pci_address == pci), None)
        return None if link is None else self._view(link)

    def create_link(self, ns: NsRef, spec: LinkSpec) -> Link:
        with self._settling():
            return self._view(_links.newlink(self._s, self._ns(ns), spec))

    def set_link(self, ns: NsRef, ifindex: int, changes: LinkChanges) -> Link:
        link = self._s.require(self._ns(ns).ref.inode, ifindex)
        with self._settling():
            _links.setlink(self._s, link, changes)
        return self._view(link)

    def set_link_options(self, ns: NsRef, ifindex: int, options: LinkOptions) -> Link:
        link = self._s.require(self._ns(ns).ref.inode, ifindex)
        with self._settling():
            _links.changelink(self._s, link, options)
        return self._view(link)

    def move_link(
        self,
        ns: NsRef,
        ifindex: int,
        target: NsRef,
        *,
        new_name: str | None = None,
        alias: str | None = None,
    ) -> Link:
        link = self._s.require(self._ns(ns).ref.inode, ifindex)
        with self._settling():
            _links.move(self._s, link, self._ns(target), new_name, alias)
        return self._view(link)

    def delete_link(self, ns: NsRef, ifindex: int) -> None:
        link = self._s.require(self._ns(ns).ref.inode, ifindex)
        if link.kind == "device":
            raise fail(errno.EOPNOTSUPP, f"{link.name} is a device; it has no dellink")
        with self._settling():
            _links.unregister(self._s, [link])

    @contextlib.contextmanager
    def _settling(self) -> Iterator[None]:
        """After a call, whether it failed or not (what it did stays): the bonds' link
        monitors catch up with the carriers it changed."""
        try:
            yield
        finally:
            _bonding.monitor(self._s)

    # -- Kernel: VFs -----------------------------------------------------------------------

    def get_vfs(self, ns: NsRef, pf_ifindex: int) -> list[VFConfig]:
        return _vfs.get_vfs(self._s, self._s.require(self._ns(ns).ref.inode, pf_ifindex))

    def set_vf(self, ns: NsRef, pf_ifindex: int, vf_index: int, changes: VFChanges) -> None:
        pf = self._s.require(self._ns(ns).ref.inode, pf_ifindex)
        with self._settling():
            _vfs.set_vf(self._s, pf, vf_index, changes)

    # -- admin: namespaces -----------------------------------------------------------------

    def add_namespace(self, name: str) -> NsRef:
        """``ip netns add NAME``: a new namespace mounted at /run/netns/NAME."""
        if not name or "/" in name or name in (".", ".."):
            raise fail(errno.EINVAL, f"invalid namespace name {name!r}")
        path = f"{NETNS_DIR}/{name}"
        if any(n.ref.path == path for n in self._s.namespaces.values()):
            raise fail(errno.EEXIST, f"namespace {name!r} already exists")
        return self._s.new_namespace(name, path).ref

    def delete_namespace(self, name: str) -> None:
        """``ip netns del NAME`` with the last reference gone: devices go home, the rest dies."""
        ns = self._named(name)
        with self._settling():
            _links.destroy_namespace(self._s, ns)

    def namespace(self, name: str) -> NsRef:
        return self._named(name).ref

    def namespaces(self) -> list[NsRef]:
        """Every live namespace, the host first (creation order)."""
        return [ns.ref for _, ns in sorted(self._s.namespaces.items())]

    # -- admin: hardware -------------------------------------------------------------------

    def add_device(
        self,
        name: str,
        *,
        pci_address: str,
        mac: str,
        mtu: int = 1500,
        min_mtu: int = 68,
        max_mtu: int = 9702,
        ns: NsRef | None = None,
        vf_of: tuple[str, int] | None = None,
        perm_mac: str | None = None,
        vf_hw_mac: str | None = None,
    ) -> Link:
        """A PCI netdev appearing (driver probe): kind "device" with a permanent address
        (``perm_mac``, default: its address)."""
        inode = self._ns(ns or self.host_namespace()).ref.inode
        name_policy(name)
        mac = parse_mac(mac)
        pci = pci_address.lower()
        if any(lk.pci_address == pci for lk in self._s.links.values()):
            raise fail(errno.EEXIST, f"PCI function {pci} already has a netdev")
        if not min_mtu <= mtu <= max_mtu:
            raise fail(errno.EINVAL, f"mtu {mtu} outside {min_mtu}..{max_mtu}")
        link = LinkState(
            id=0,
            ifindex=0,
            name=claim_name(self._s, inode, name),
            kind="device",
            ns=inode,
            mac=mac,
            mac_assign="perm",
            mtu=mtu,
            min_mtu=min_mtu,
            max_mtu=max_mtu,
            perm_mac=parse_mac(perm_mac) if perm_mac else mac,
            pci_address=pci,
            vf_of=vf_of,
            vf_hw_mac=vf_hw_mac,
        )
        return self._view(self._s.add(link))

    def add_pf(
        self,
        name: str,
        *,
        pci_address: str,
        mac: str,
        capabilities: Iterable[str],
        vfs: list[tuple[str, str, str]],
        mtu: int = 1500,
        max_mtu: int = 9702,
        vf_mtu: int = 1500,
        vf_max_mtu: int = 9702,
        nic: NicProfile | None = None,
        cable: bool = True,
        link_kept: bool = False,
    ) -> Link:
        """A PF with ``sriov_numvfs`` VFs; ``vfs`` is (netdev name, PCI address, MAC) per VF.

        ``nic``: the driver's profile (default: ``generic`` with ``capabilities`` and the
        MTU bounds given); a "random" ``vf_mac`` profile ignores the MACs given.
        ``link_kept``: the port's link status stays set while the PF is down (PfState)."""
        caps = frozenset(capabilities)
        unknown = caps - _vfs.CAPABILITIES
        if unknown:
            raise fail(errno.EINVAL, f"unknown VF capabilities {sorted(unknown)}")
        nic = nic or profile("generic", capabilities=caps, max_mtu=max_mtu)
        pf = self.add_device(
            name, pci_address=pci_address, mac=mac, mtu=mtu, min_mtu=nic.min_mtu, max_mtu=max_mtu
        )
        pci = pf.pci_address or ""
        self._s.pfs[pci] = PfState(pci, caps, [], nic, name, vf_mtu, cable, link_kept)
        for index, (vf_name, vf_address, vf_mac) in enumerate(vfs):
            self._add_vf(self._s.pfs[pci], index, vf_name, vf_address, vf_mac, vf_max_mtu)
        return pf

    def _add_vf(
        self, table: PfState, index: int, name: str, pci: str, mac: str, max_mtu: int
    ) -> Link:
        """VF ``index`` of ``table`` appearing: its VF-table entry, then its netdev."""
        nic = table.nic
        table.vfs.append(VfState())
        perm = None
        hw = None
        if nic.vf_mac == "random":
            # igbvf_probe: eth_hw_addr_random when its PF gave none, then igbvf_reset:
            # the address is its hardware address and its permanent address
            mac = perm = hw = self._s.random_mac()
            if self._s.mac_address_policy == "persistent":
                # udev sets the address its name gives (the same for every VF of this
                # index), which igbvf_set_mac makes the hardware address; the permanent
                # address stays the made-up one
                mac = hw = table.vf_hw_memory.setdefault(index, self._s.random_mac())
        elif not mac:
            mac = derived_mac(pci)
        made = self.add_device(
            name,
            pci_address=pci,
            mac=mac,
            perm_mac=perm,
            mtu=table.vf_mtu,
            min_mtu=nic.min_mtu,
            max_mtu=max_mtu,
            vf_of=(table.pci, index),
            vf_hw_mac=hw,
        )
        pf = _vfs.pf_of(self._s, table)
        if nic.vf_mailbox and nic.vf_probe_answered and pf is not None and pf.up:
            table.vf_cts.add(index)  # its probe's reset was answered ...
            table.vfs[index].mac = made.mac  # ... and it programmed its address
        return made

    def set_sriov_numvfs(self, pf: str, count: int) -> list[str]:
        """Write ``count`` to the ``sriov_numvfs`` of the host's PF netdev ``pf``
        (sriov_numvfs_store): the same count is a no-op, more than ``sriov_totalvfs``
        ERANGE, a change between two non-zero counts EBUSY; 0 removes every VF, wherever
        its netdev is (a bond releases it, links stacked on it die); VFs made appear in
        the host named ``<pf>v<i>``. Returns the new VFs' names ([] when none were made)."""
        link = self._s.by_name(self._s.host.ref.inode, pf)
        table = self._s.pfs.get(link.pci_address or "") if link is not None else None
        if link is None or table is None:
            raise fail(errno.ENODEV, f"{pf!r} is not an SR-IOV PF in the host namespace")
        nic = table.nic
        if not 0 <= count <= nic.totalvfs:
            raise fail(errno.ERANGE, f"{count} VFs: sriov_totalvfs is {nic.totalvfs}")
        current = len(table.vfs)
        if count == current:
            return []
        with self._settling():
            return self._change_numvfs(table, current, count)

    def _change_numvfs(self, table: PfState, current: int, count: int) -> list[str]:
        pf, nic = table.name, table.nic
        if count and current:
            raise fail(errno.EBUSY, f"{pf} already has {current} VFs; write 0 first")
        if count == 0:
            for index in reversed(range(current)):
                vf = _vfs.vf_netdev(self._s, table.pci, index)
                if vf is not None:
                    self.remove_device(vf.pci_address or "")
            table.vfs.clear()  # igb_disable_sriov frees vf_data: flags and all
            table.vf_cts.clear()
            table.vf_pf_set_mac.clear()
            return []
        names = []
        for index in range(count):
            pci = vf_pci(table.pci, nic, index)
            if pci is None:
                raise fail(errno.ERANGE, f"VF {index} runs past the PCI bus range")
            made = self._add_vf(table, index, f"{table.name}v{index}", pci, "", nic.max_mtu)
            names.append(made.name)
        return names

    def sriov_totalvfs(self, pf: str) -> int:
        link = self._s.by_name(self._s.host.ref.inode, pf)
        table = self._s.pfs.get(link.pci_address or "") if link is not None else None
        if table is None:
            raise fail(errno.ENODEV, f"{pf!r} is not an SR-IOV PF in the host namespace")
        return table.nic.totalvfs

    # -- admin: options of existing links (ip link set NAME type KIND ...) -----------------

    def change_link(self, ns: NsRef, name: str, option: str, value: str) -> None:
        """``ip link set NAME type KIND OPTION VALUE``: ``option`` is one of bond.mode,
        bond.miimon, bond.active_slave (a slave's name, "" for none), ipvlan.mode,
        macvlan.mode, vlan.id; ``value`` as ``ip link`` takes it. The differential
        corpus's spelling of ``set_link_options``."""
        space = self._ns(ns)
        link = self._s.by_name(space.ref.inode, name)
        if link is None:
            raise fail(errno.ENODEV, f"no link {name!r}")
        kind = option.partition(".")[0]
        if option == "vlan.id":
            # vlan_changelink has no IFLA_VLAN_ID: the id of a vlan never changes, but
            # ip sends it and vlan_validate checks it.
            if link.kind != "vlan":
                raise fail(errno.EOPNOTSUPP, f"{link.name} is a {link.kind}, not a vlan")
            if not 0 <= int(value) < 4095:
                raise fail(errno.ERANGE, f"invalid vlan id {value}")
            return
        if option == "bond.active_slave":
            slave = self._s.by_name(space.ref.inode, value) if value else None
            if value and slave is None:
                raise fail(errno.ENODEV, f"no link {value!r}")
            changes: dict[str, Any] = {"active_slave": 0 if slave is None else slave.ifindex}
        elif option == "bond.miimon":
            changes = {"miimon_ms": int(value)}
        elif option in ("bond.mode", "ipvlan.mode", "macvlan.mode"):
            changes = {"bond_mode" if kind == "bond" else "mode": value}
        else:
            raise fail(errno.EINVAL, f"unknown link option {option!r}")
        with self._settling():
            _links.changelink(self._s, link, LinkOptions(kind=cast(LinkKind, kind), **changes))

    def bond_active_slave(self, ns: NsRef, bond: str) -> str:
        """The name of ``bond``'s active slave, "" for none (the model fails over at once)."""
        link = self._s.by_name(self._ns(ns).ref.inode, bond)
        if link is None:
            raise fail(errno.ENODEV, f"no link {bond!r}")
        active = link.bond.active if link.bond is not None else None
        return "" if active is None else self._s.links[active].name

    def remove_device(self, pci_address: str) -> None:
        """A PCI netdev vanishing (driver unbind, fewer VFs): unregister_netdevice.

        A bond releases it first; links stacked on it die with it.
        """
        link = next(
            (lk for lk in self._s.links.values() if lk.pci_address == pci_address.lower()), None
        )
        if link is None:
            raise fail(errno.ENODEV, f"no netdev for PCI function {pci_address}")
        if link.master is not None:
            _bonding.release(self._s, self._s.links[link.master], link)
        _links.unregister(self._s, [link])

    def snapshot(self) -> dict[str, Any]:
        """The whole state, normalized and JSON-serializable (see ``diff``)."""
        return snapshot(self._s)

    # -- helpers ---------------------------------------------------------------------------

    def _ns(self, ref: NsRef) -> Namespace:
        return self._s.namespace(ref)

    def _named(self, name: str) -> Namespace:
        ns = next((n for n in self._s.namespaces.values() if n.name == name and name), None)
        if ns is None:
            raise fail(errno.ENOENT, f"no namespace named {name!r}")
        return ns

    @staticmethod
    def _sorted(links: Iterable[LinkState]) -> list[LinkState]:
        return sorted(links, key=lambda lk: lk.ifindex)

    def _ifindex(self, link_id: int | None) -> int | None:
        return None if link_id is None else self._s.links[link_id].ifindex

    def _view(self, lk: LinkState) -> Link:
        s = self._s
        parent = s.links.get(lk.parent) if lk.parent is not None else None
        mode = lk.mode
        ipvlan_flag = None
        if lk.kind == "ipvlan" and parent is not None:
            mode = parent.ipvlan_port_mode  # IFLA_IPVLAN_MODE reports the port's mode
            ipvlan_flag = parent.ipvlan_port_flag  # and IFLA_IPVLAN_FLAGS its flags
        bond = None
        if lk.bond is not None:
            b = lk.bond
            active = self._ifindex(b.active)
            bond = BondInfo(
                b.mode, b.miimon_ms, b.updelay_ms, b.downdelay_ms, active, b.fail_over_mac
            )
        link = object.__new__(Link)
        vars(link).update(
            ifindex=lk.ifindex,
            name=lk.name,
            kind=lk.kind,
            ns=s.namespaces[lk.ns].ref,
            mac=lk.mac,
            mtu=lk.mtu,
            up=lk.up,
            min_mtu=lk.min_mtu,
            max_mtu=lk.max_mtu,
            master=self._ifindex(lk.master),
            parent=None if parent is None else parent.ifindex,
            parent_ns=None if parent is None or parent.ns == lk.ns else s.namespaces[parent.ns].ref,
            alias=lk.alias,
            perm_mac=lk.perm_mac,
            pci_address=lk.pci_address,
            vf_of=lk.vf_of,
            bond=bond,
            vlan_id=lk.vlan_id,
            vlan_protocol=lk.vlan_protocol,
            mode=mode,
            peer=self._ifindex(lk.peer),
            ipvlan_flag=ipvlan_flag,
        )
        assert vars(link).keys() == _LINK_FIELDS
        return link


def _is_a_kernel(model: FakeKernelModel) -> Kernel:
    return model  # mypy proves the model satisfies the Kernel protocol
