"""What only the VM lab's guest can tell: its kernel release and its PFs' SR-IOV.

The kernel agent (``labs.kernel_agent``) answers these beside the ``Kernel`` protocol;
``VmKernel`` is the host's side. Kept apart from the agent's transport so
the guest-only surface can grow (sysfs knobs the ``Kernel`` protocol does not model)
without touching the wire.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fakekernel.client import FakeKernelClient
from plugins.kernel import Kernel, LinkChanges, LinkKind, LinkSpec, NsRef, kernel_error

__all__ = ["GUEST_METHODS", "GUEST_PARAMS", "GuestSide", "VmKernel"]

# The guest-only methods and their parameters' types (all plain JSON scalars).
GUEST_PARAMS: dict[str, dict[str, type]] = {
    "release": {},
    "sriov": {"pf": str},
    "set_sriov_numvfs": {"pf": str, "count": int},
    "write_sriov_numvfs": {"pf": str, "count": int},
    "pci_sriov": {"pci": str},
    "write_pci_sriov_numvfs": {"pci": str, "count": int, "stem": str},
    "renumber_link": {"name": str, "ifindex": int},
    "change_link": {"ns": str, "name": str, "option": str, "value": str},
    "await_bond_active": {"ns": str, "bond": str, "avoid": str, "timeout_s": float},
    "await_port_link": {"pf": str, "timeout_s": float},
    "hang": {"seconds": float},  # test only: see GuestSide.hang
}
# The options ``change_link`` changes on an existing link (RTM_NEWLINK without
# NLM_F_CREATE, IFLA_LINKINFO's kind data), and how their value is given.
LINK_OPTIONS = ("bond.mode", "bond.miimon", "bond.active_slave", "ipvlan.mode", "vlan.id")
BOND_MODE_NUMBERS = {
    "balance-rr": 0,
    "active-backup": 1,
    "balance-xor": 2,
    "broadcast": 3,
    "802.3ad": 4,
    "balance-tlb": 5,
    "balance-alb": 6,
}
IPVLAN_MODE_NUMBERS = {"l2": 0, "l3": 1, "l3s": 2}
# How long the VFs' netdevs may take to appear after sriov_numvfs is written (TCG).
VF_NETDEV_DEADLINE_S = 60.0
# How long write_sriov_numvfs leaves the naming of new VF netdevs to udev.
UDEV_GRACE_S = 10.0
SYSFS_NET = Path("/sys/class/net")
IFF_UP = 0x1
SIOCGMIIPHY, SIOCGMIIREG = 0x8947, 0x8948  # linux/sockios.h
MII_BMSR, BMSR_LINK_STATUS = 0x01, 0x0004  # linux/mii.h
PORT_LINK_POLL_S = 0.01
# A PF lent into a lab session's node is not under the agent's /sys/class/net (sysfs
# shows the netdevs of the namespace it was mounted in); its PCI function always is here.
SYSFS_PCI = Path("/sys/bus/pci/devices")
PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
GUEST_METHODS = tuple(GUEST_PARAMS)


# udev, asked whether it is alive after it left VFs unnamed; at most once a minute.
UDEV_PING_TIMEOUT_S = 5
UDEV_CHECK_EVERY_S = 60.0
_udev_checked = [float("-inf")]  # never checked yet


def revive_udev() -> None:
    """After udev left new VFs unnamed: if it no longer answers a ping, start it again
    (a 6.1 guest's udev stopped naming VFs for good after ~50 minutes of a long session,
    docs/generated-differential.md, and every later ``sriov_numvfs`` then waited out
    ``UDEV_GRACE_S``). Either way the agent's log says which it was."""
    now = time.monotonic()
    if now - _udev_checked[0] < UDEV_CHECK_EVERY_S:
        return
    _udev_checked[0] = now
    ping = ["udevadm", "control", "--ping", f"--timeout={UDEV_PING_TIMEOUT_S}"]
    alive = subprocess.run(ping, capture_output=True, check=False).returncode == 0
    if alive:
        print("udev left new VFs unnamed but answers a ping", file=sys.stderr, flush=True)
        return
    started = subprocess.run(
        ["/lib/systemd/systemd-udevd", "--daemon"], capture_output=True, check=False
    )
    print(
        f"udev left new VFs unnamed and answered no ping: started again "
        f"(exit {started.returncode})",
        file=sys.stderr,
        flush=True,
    )


class GuestSide:
    """What the agent answers from the guest itself: its release and its PFs' SR-IOV."""

    def __init__(self, node_pin: str) -> None:
        self.node_pin = node_pin

    def release(self) -> str:
        return os.uname().release

    def sriov(self, pf: str) -> dict[str, int]:
        return _sriov_counts(self._device(pf))

    def set_sriov_numvfs(self, pf: str, count: int) -> list[str]:
        """Write ``count`` to the PF's ``sriov_numvfs`` (through 0, as the kernel asks
        when VFs exist) and return the VFs' netdev names once all of them exist."""
        from .netns import _link_events

        device = self._device(pf)
        numvfs = device / "sriov_numvfs"
        with _link_events(self.node_pin) as events:
            if int(numvfs.read_text()) not in (0, count):
                numvfs.write_text("0")
            if int(numvfs.read_text()) != count:
                numvfs.write_text(str(count))
            deadline = time.monotonic() + VF_NETDEV_DEADLINE_S
            while (names := _vf_netdevs(device, count)) is None:
                if not events.wait(deadline - time.monotonic()):
                    raise kernel_error(
                        errno.ETIMEDOUT,
                        f"{pf}: {count} VF netdevs not there {VF_NETDEV_DEADLINE_S:g} s after "
                        "sriov_numvfs was written",
                    )
            return names

    def write_sriov_numvfs(self, pf: str, count: int) -> list[str]:
        """Write ``count`` to the PF's ``sriov_numvfs`` as it is (no detour through 0, so
        the kernel's own answers show: EBUSY, ERANGE); when that created VFs, return
        their netdev names once udev has named all of them, else []."""
        return self._write_numvfs(self._device(pf), pf, pf, count)

    def pci_sriov(self, pci: str) -> dict[str, int]:
        """``sriov`` of the PF at PCI address ``pci``, wherever its netdev is."""
        return _sriov_counts(self._pci_device(pci))

    def write_pci_sriov_numvfs(self, pci: str, count: int, stem: str) -> list[str]:
        """``write_sriov_numvfs`` of the PF at PCI address ``pci``, also while its netdev is
        lent into a session's node: what an administrator's ``echo N > sriov_numvfs`` does.
        ``stem`` is the PF's name in the root namespace: udev names new VFs
        ``<stem>v<index>``, and the agent does if udev does not."""
        if "/" in stem or not stem:
            raise kernel_error(errno.EINVAL, f"{stem!r} is no netdev name")
        return self._write_numvfs(self._pci_device(pci), pci, stem, count)

    def _write_numvfs(self, device: Path, label: str, stem: str, count: int) -> list[str]:
        from .netns import _link_events

        numvfs = device / "sriov_numvfs"
        before = int(numvfs.read_text())
        # New VF netdevs always appear in the root namespace (the agent's), whatever
        # namespace their PF is in.
        with _link_events(self.node_pin) as events:
            try:
                with numvfs.open("w") as out:
                    out.write(str(count))
            except OSError as exc:
                raise kernel_error(
                    exc.errno or errno.EIO, f"{label}: sriov_numvfs={count}"
                ) from None
            if count in (0, before):
                return []
            started = time.monotonic()
            deadline = started + VF_NETDEV_DEADLINE_S
            renamed = False
            while (names := _vf_netdevs(device, count)) is None:
                if not renamed and time.monotonic() > started + UDEV_GRACE_S:
                    # udev has not named them (seen on 6.12 under load, the rename never
                    # came): give them the name udev's policy gives, <pf>v<index>
                    self._name_vfs(stem, device, count)
                    renamed = True
                    revive_udev()
                    continue
                wait = (started + UDEV_GRACE_S if not renamed else deadline) - time.monotonic()
                if not events.wait(max(wait, 0.001)) and renamed and time.monotonic() > deadline:
                    raise kernel_error(errno.ETIMEDOUT, f"{label}: {count} VF netdevs never named")
            return names

    def renumber_link(self, name: str, ifindex: int) -> None:
        """Give the root namespace's device ``name`` the ifindex ``ifindex`` (see
        ``renumber``); the agent's ``wire`` namespace, beside its ``node`` pin, is the detour."""
        renumber(self.node_pin, str(Path(self.node_pin).with_name("wire")), name, ifindex)

    def _name_vfs(self, pf: str, device: Path, count: int) -> None:
        """Rename VF netdevs still called eth* to ``<pf>v<index>`` (what udev does)."""
        from pyroute2 import IPRoute
        from pyroute2.netlink.exceptions import NetlinkError

        with _route_in(self.node_pin, IPRoute) as route:
            for index in range(count):
                net = device / f"virtfn{index}" / "net"
                found = sorted(net.iterdir()) if net.is_dir() else []
                if found and found[0].name.startswith("eth"):
                    links = route.link_lookup(ifname=found[0].name)
                    if links:
                        with contextlib.suppress(NetlinkError):  # udev got there first
                            route.link("set", index=links[0], ifname=f"{pf}v{index}")

    def change_link(self, ns: str, name: str, option: str, value: str) -> None:
        """Change one option of an existing link in the namespace pinned at ``ns``, as
        ``ip link set NAME type KIND OPTION VALUE`` does (RTM_NEWLINK, IFLA_LINKINFO)."""
        from pyroute2 import IPRoute
        from pyroute2.netlink.exceptions import NetlinkError

        if option not in LINK_OPTIONS:
            raise kernel_error(errno.EINVAL, f"unknown link option {option!r}")
        kind = option.partition(".")[0]
        with _route_in(ns, IPRoute) as route:
            found = route.link_lookup(ifname=name)
            if not found:
                raise kernel_error(errno.ENODEV, f"no link {name!r}")
            data: dict[str, Any]
            if option == "bond.mode":
                data = {"bond_mode": BOND_MODE_NUMBERS.get(value, 99)}
            elif option == "bond.miimon":
                if int(value) < 0:  # IFLA_BOND_MIIMON is a u32 (the backend's check)
                    raise kernel_error(errno.EINVAL, f"miimon {value}")
                data = {"bond_miimon": int(value)}
            elif option == "bond.active_slave":
                slave = route.link_lookup(ifname=value) if value else [0]
                data = {"bond_active_slave": slave[0] if slave else 0x7FFFFF00}
            elif option == "ipvlan.mode":
                data = {"ipvlan_mode": IPVLAN_MODE_NUMBERS.get(value, 99)}
            else:
                data = {"vlan_id": int(value)}
            try:
                route.link("set", index=found[0], kind=kind, **data)
            except NetlinkError as exc:
                raise kernel_error(exc.code, f"{name}: {option}={value}") from None

    def await_bond_active(self, ns: str, bond: str, avoid: str, timeout_s: float) -> str:
        """The name of ``bond``'s active slave ("" for none) once it is not ``avoid``, or
        as it is at the deadline: the bond's link monitor fails over in its own time."""
        from .netns import _link_events

        deadline = time.monotonic() + timeout_s
        with _link_events(ns) as events:
            while (active := self._active_slave(ns, bond)) == avoid:
                if not events.wait(deadline - time.monotonic()):
                    break
            return active

    def await_port_link(self, pf: str, timeout_s: float) -> bool:
        """Whether the PF's port has link (its PHY's status register, what igb's STATUS.LU
        follows) and, while the PF is up, its driver has seen it (carrier), once both
        hold or at the deadline. Each reset of an igb PF (open, close, an MTU change,
        ``sriov_numvfs``) restarts QEMU's emulated autonegotiation, which takes the link
        away for 500 ms: what a VF rate call answers meanwhile depends on timing."""
        self._device(pf)  # an SR-IOV PF of this guest, by name: nothing else is asked
        deadline = time.monotonic() + timeout_s
        while not (_phy_link(pf) and _carrier_if_up(pf)):
            if time.monotonic() > deadline:
                return False
            # The PHY's register changes without an event to wait on (no interrupt while
            # the PF is down): polled, within the deadline.
            time.sleep(PORT_LINK_POLL_S)
        return True

    def hang(self, seconds: float) -> None:
        """Test only (no lab code sends it): stop answering for ``seconds``. The agent
        serves one request at a time, so every request after this one waits too: the
        host sees a guest that stopped answering (tests/labs/test_guest_watch.py). A
        bounded sleep, not a wait for anything: the fault itself, kept finite so a hung
        agent whose host never notices still ends."""
        time.sleep(seconds)

    @staticmethod
    def _active_slave(ns: str, bond: str) -> str:
        from pyroute2 import IPRoute

        with _route_in(ns, IPRoute) as route:
            found = route.link_lookup(ifname=bond)
            if not found:
                raise kernel_error(errno.ENODEV, f"no link {bond!r}")
            info = route.link("get", index=found[0])[0].get_attr("IFLA_LINKINFO")
            data = info.get_attr("IFLA_INFO_DATA") if info is not None else None
            index = data.get_attr("IFLA_BOND_ACTIVE_SLAVE") if data is not None else None
            if not index:
                return ""
            return str(route.link("get", index=index)[0].get_attr("IFLA_IFNAME"))

    @staticmethod
    def _pci_device(pci: str) -> Path:
        device = SYSFS_PCI / pci
        if not PCI_ADDRESS.fullmatch(pci) or not (device / "sriov_totalvfs").exists():
            raise kernel_error(errno.ENODEV, f"{pci!r} is no SR-IOV PF's PCI address here")
        return device

    @staticmethod
    def _device(pf: str) -> Path:
        device = SYSFS_NET / pf / "device"
        if "/" in pf or not (device / "sriov_totalvfs").exists():
            raise kernel_error(errno.ENODEV, f"{pf!r} is not an SR-IOV PF in this guest")
        return device


def give_pfs_link_once(kernel: Kernel, node_pin: str, deadline_s: float = 30.0) -> list[str]:
    """Open each SR-IOV PF that is down until it has carrier, then close it again; the
    names of those opened. QEMU's igb keeps the port's link status (STATUS.LU) from the
    first time it had link to the end of the boot, and igb's VF rates ask for it, so
    without this what a VF rate call answers would depend on whether anything opened
    the PF earlier in the boot. The model of the guest says the same (vm-igb.yaml:
    ``link_kept``)."""
    from .netns import _link_events

    host = kernel.host_namespace()
    pfs = [
        lk
        for lk in kernel.list_links(host)
        if not lk.up and (SYSFS_NET / lk.name / "device" / "sriov_totalvfs").exists()
    ]
    with _link_events(node_pin) as events:
        for pf in pfs:
            kernel.set_link(host, pf.ifindex, LinkChanges(up=True))
        deadline = time.monotonic() + deadline_s
        while not all(_has_carrier(pf.name) for pf in pfs):
            if not events.wait(deadline - time.monotonic()):
                waiting = [pf.name for pf in pfs if not _has_carrier(pf.name)]
                raise kernel_error(
                    errno.ETIMEDOUT, f"{waiting}: no carrier {deadline_s:g} s after opening"
                )
    for pf in pfs:
        kernel.set_link(host, pf.ifindex, LinkChanges(up=False))
    return [pf.name for pf in pfs]


# The kinds whose module the kernel loads on first use and whose ops->validate runs
# before a taken name is found (EEXIST): until the module is loaded, a taken name with a
# bad MTU or VLAN id answers EEXIST, after it EINVAL or ERANGE. A veth pair is made
# first, these on it; bonding and dummy are left out (loading them makes bond0 and
# dummy0 in the root namespace).
MODULE_KINDS: tuple[tuple[LinkKind, dict[str, Any]], ...] = (
    ("vlan", {"vlan_id": 2}),
    ("macvlan", {}),
    ("ipvlan", {}),
    ("bridge", {}),
)


def load_link_modules(kernel: Kernel, ns: NsRef) -> None:
    """Make and delete a veth pair and one link of each of MODULE_KINDS in ``ns`` (a
    scratch namespace), so that their modules are loaded from the boot on, whatever ran
    first: a node whose link kinds have been used, as the model of the guest has it."""
    veth = LinkSpec(kind="veth", name="dranp-load0", peer_name="dranp-load1")
    base = kernel.create_link(ns, veth)
    try:
        for kind, extra in MODULE_KINDS:
            parent = None if kind == "bridge" else base.ifindex
            spec = LinkSpec(kind=kind, name=f"dranp-{kind}", parent=parent, **extra)
            kernel.delete_link(ns, kernel.create_link(ns, spec).ifindex)
    finally:
        kernel.delete_link(ns, base.ifindex)


def _has_carrier(netdev: str) -> bool:
    return (SYSFS_NET / netdev / "carrier").read_text().strip() == "1"


def _carrier_if_up(netdev: str) -> bool:
    flags = int((SYSFS_NET / netdev / "flags").read_text(), 16)
    return not flags & IFF_UP or _has_carrier(netdev)


def _phy_link(netdev: str) -> bool:
    """The link bit of the PHY's status register (MII BMSR), read through the driver
    (SIOCGMIIPHY, SIOCGMIIREG), which answers while the netdev is down too."""
    import fcntl

    name = netdev.encode()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = bytearray(struct.pack("16s24x", name))
        fcntl.ioctl(sock, SIOCGMIIPHY, request)
        phy_id = struct.unpack_from("H", request, 16)[0]
        request = bytearray(struct.pack("16sHHHH16x", name, phy_id, MII_BMSR, 0, 0))
        fcntl.ioctl(sock, SIOCGMIIREG, request)
        status = struct.unpack_from("H", request, 22)[0]
    return bool(status & BMSR_LINK_STATUS)


def _sriov_counts(device: Path) -> dict[str, int]:
    return {
        "totalvfs": int((device / "sriov_totalvfs").read_text()),
        "numvfs": int((device / "sriov_numvfs").read_text()),
    }


def _vf_netdevs(device: Path, count: int) -> list[str] | None:
    """The netdev names of VFs 0..count-1 of the PF ``device``; None while one is missing
    (the VF's driver has not bound yet, or udev has not renamed it yet: names still
    ``eth*`` are not final)."""
    names = []
    for index in range(count):
        net = device / f"virtfn{index}" / "net"
        found = sorted(net.iterdir()) if net.is_dir() else []
        if not found or found[0].name.startswith("eth"):
            return None
        names.append(found[0].name)
    return names


def renumber(node_pin: str, detour_pin: str, name: str, ifindex: int) -> None:
    """Give the device ``name`` of the namespace pinned at ``node_pin`` the ifindex
    ``ifindex`` (free there): Linux numbers a new device anew (a VF removed and made
    again by ``sriov_numvfs`` comes back under a new one), and an ifindex can only be
    chosen when a device enters a namespace (IFLA_NEW_IFINDEX, Linux 5.13), so the
    device goes out to the namespace pinned at ``detour_pin`` and comes home under it.
    Moving closes the device: its admin state is the caller's to restore. A refused
    homecoming (the ifindex is taken) still brings the device home, then raises."""
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    with _route_in(node_pin, IPRoute) as route:
        found = route.link_lookup(ifname=name)
        if not found:
            raise kernel_error(errno.ENODEV, f"no link {name!r}")
        if found[0] == ifindex:
            return
        with _pinned_fd(detour_pin) as detour:
            route.link("set", index=found[0], net_ns_fd=detour)
    with _route_in(detour_pin, IPRoute) as route, _pinned_fd(node_pin) as home:
        (away,) = route.link_lookup(ifname=name)
        try:
            route.link("set", index=away, net_ns_fd=home, new_ifindex=ifindex)
        except NetlinkError as exc:
            route.link("set", index=away, net_ns_fd=home)
            raise kernel_error(exc.code, f"{name}: ifindex {ifindex}") from None


@contextlib.contextmanager
def _pinned_fd(ns_path: str) -> Iterator[int]:
    fd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _route_in(ns_path: str, factory: Any) -> Iterator[Any]:
    """A pyroute2 ``IPRoute`` on an rtnetlink socket of the namespace pinned at ``ns_path``."""
    from plugins.kernel.linux.netns import run_in_netns

    from .netns import _rtnl_socket

    fd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        sock = run_in_netns(fd, _rtnl_socket, cleanup=socket.socket.close)
    finally:
        os.close(fd)
    with sock, factory(use_socket=sock) as route:
        yield route


class VmKernel(FakeKernelClient):
    """The guest's kernel through the agent: the ``Kernel`` protocol and the lab's
    named namespaces and snapshot (as ``FakeKernelClient`` speaks them), plus what only
    the guest can tell."""

    def release(self) -> str:
        """The guest kernel's ``uname -r``."""
        return str(self._call("release"))

    def sriov(self, pf: str) -> dict[str, int]:
        """``{"totalvfs": n, "numvfs": n}`` of a PF netdev of the guest."""
        answer: dict[str, int] = self._call("sriov", pf=pf)
        return answer

    def set_sriov_numvfs(self, pf: str, count: int) -> list[str]:
        """Give the PF ``count`` VFs; returns their netdev names once all exist."""
        return [str(name) for name in self._call("set_sriov_numvfs", pf=pf, count=count)]

    def write_sriov_numvfs(self, pf: str, count: int) -> list[str]:
        """Write ``count`` to the PF's ``sriov_numvfs`` as it is (the kernel's errno on
        refusal); the new VFs' netdev names once named, [] when none were created."""
        return [str(name) for name in self._call("write_sriov_numvfs", pf=pf, count=count)]

    def pci_sriov(self, pci: str) -> dict[str, int]:
        """``sriov`` of the PF at PCI address ``pci`` (also while lent to a session)."""
        answer: dict[str, int] = self._call("pci_sriov", pci=pci)
        return answer

    def write_pci_sriov_numvfs(self, pci: str, count: int, stem: str) -> list[str]:
        """``write_sriov_numvfs`` of the PF at PCI address ``pci``, wherever its netdev is
        (``stem``: its root name, which udev's VF names start with)."""
        answer = self._call("write_pci_sriov_numvfs", pci=pci, count=count, stem=stem)
        return [str(name) for name in answer]

    def renumber_link(self, name: str, ifindex: int) -> None:
        """The root namespace's device ``name`` under ``ifindex`` again (it comes home
        down: see ``labs._guest.renumber``)."""
        self._call("renumber_link", name=name, ifindex=ifindex)

    def change_link(self, ns: NsRef, name: str, option: str, value: str) -> None:
        """Change an option of an existing link (``LINK_OPTIONS``: bond mode, miimon,
        active slave; ipvlan mode; vlan id), as ``ip link set NAME type KIND ...``."""
        self._call("change_link", ns=ns.path, name=name, option=option, value=value)

    def await_bond_active(self, ns: NsRef, bond: str, avoid: str, timeout_s: float) -> str:
        """``bond``'s active slave ("": none) once it is not ``avoid``, or at the deadline."""
        return str(
            self._call("await_bond_active", ns=ns.path, bond=bond, avoid=avoid, timeout_s=timeout_s)
        )

    def await_port_link(self, pf: str, timeout_s: float) -> bool:
        """Whether the PF's port has link (and carrier, while up), once it has or at the
        deadline (``GuestSide.await_port_link``)."""
        return bool(self._call("await_port_link", pf=pf, timeout_s=timeout_s))

    def hang(self, seconds: float) -> None:
        """Test only: the agent stops answering for ``seconds`` (``GuestSide.hang``); this
        call returns when the host gives up on it (the relay's call timeout), raising."""
        self._call("hang", seconds=seconds)
