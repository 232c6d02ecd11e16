"""VmLab: Debian's kernel in a QEMU guest, reached through the guest's kernel agent.

One guest per session (the kit's ``vm_lab`` fixture: a boot under TCG takes minutes,
never per test). The kernel is ``DRANP_VM_KERNEL`` (a key of ``labs.vm.KERNELS``;
default 6.1). The guest runs the asked release; both emulated igb PFs give VFs with netdevs; every link kind the issue
names is created through ``lab.kernel``, shows in the list and the snapshot, and
deleting it all gives back the snapshot the test started from.
"""

from __future__ import annotations

import time

import pytest

from fakekernel.model import diff
from labs import AgentSession
from labs.netns import PARENTS
from labs.vm import BOOT_DEADLINE_S, PFS, VmLab, asked_kernel, kernel_image
from plugins.kernel import BondInfo, LinkChanges, LinkSpec, open_kernel

# Whichever test runs first boots the guest in its setup, under the per-test timeout.
pytestmark = [pytest.mark.vm, pytest.mark.timeout(BOOT_DEADLINE_S + 120)]

KERNEL = asked_kernel()
VFS_PER_PF = 4


def test_the_guest_runs_the_asked_kernel(vm_lab: VmLab) -> None:
    image = kernel_image(KERNEL)
    assert image is not None
    assert vm_lab.kernel.release() == image.name.removeprefix("vmlinuz-")


def test_the_guest_boots_with_its_pfs_down_and_their_ports_linked(vm_lab: VmLab) -> None:
    """The agent opened each PF once at boot (QEMU's igb keeps the link status from
    then on), and left it down: the fake of the guest (vm-igb.yaml) says so."""
    k = vm_lab.kernel
    host = k.host_namespace()
    for pf in PFS:
        pf_link = k.get_link(host, name=pf)
        assert pf_link is not None
        assert not pf_link.up, f"{pf} is up after boot"
        assert k.await_port_link(pf, 5.0), f"{pf}'s port has no link status after boot"


def test_both_igb_pfs_give_vfs_with_netdevs(vm_lab: VmLab) -> None:
    k = vm_lab.kernel
    host = k.host_namespace()
    for pf in PFS:
        assert k.sriov(pf)["totalvfs"] >= VFS_PER_PF
        names = k.set_sriov_numvfs(pf, VFS_PER_PF)
        assert len(names) == VFS_PER_PF
        assert k.sriov(pf)["numvfs"] == VFS_PER_PF
        pf_link = k.get_link(host, name=pf)
        assert pf_link is not None
        assert pf_link.pci_address is not None
        vfs = {link.name: link.vf_of for link in k.list_links(host) if link.vf_of is not None}
        assert {name: vfs.get(name) for name in names} == {
            name: (pf_link.pci_address, index) for index, name in enumerate(names)
        }


def test_every_link_kind_comes_and_goes_through_the_agent(vm_lab: VmLab) -> None:
    k = vm_lab.kernel
    before = k.snapshot()
    host = k.host_namespace()
    pod = k.add_namespace("vm-kinds")

    dummy = k.create_link(host, LinkSpec(kind="dummy", name="dum0"))
    bond = k.create_link(
        host,
        LinkSpec(kind="bond", name="bond0", bond=BondInfo(mode="active-backup", miimon_ms=100)),
    )
    members = [k.create_link(host, LinkSpec(kind="dummy", name=f"mem{i}")) for i in range(2)]
    for member in members:
        k.set_link(host, member.ifindex, LinkChanges(master=bond.ifindex))
    vlan = k.create_link(
        host, LinkSpec(kind="vlan", name="dum0.10", parent=dummy.ifindex, vlan_id=10)
    )
    # One parent each: Linux refuses a macvlan on a device with ipvlan ports (EBUSY).
    lower = k.create_link(pod, LinkSpec(kind="dummy", name="low0"))
    other = k.create_link(pod, LinkSpec(kind="dummy", name="low1"))
    ipvlan = k.create_link(
        pod, LinkSpec(kind="ipvlan", name="ipv0", parent=lower.ifindex, mode="l2")
    )
    macvlan = k.create_link(
        pod, LinkSpec(kind="macvlan", name="mac0", parent=other.ifindex, mode="bridge")
    )

    listed = {link.name: link for link in k.list_links(host) + k.list_links(pod)}
    assert {name: listed[name].kind for name in ("dum0", "bond0", "mem0", "mem1", "dum0.10")} == {
        "dum0": "dummy",
        "bond0": "bond",
        "mem0": "dummy",
        "mem1": "dummy",
        "dum0.10": "vlan",
    }
    assert [listed[f"mem{i}"].master for i in range(2)] == [bond.ifindex] * 2
    assert listed["dum0.10"].vlan_id == 10
    assert (listed["ipv0"].kind, listed["ipv0"].parent) == ("ipvlan", lower.ifindex)
    assert (listed["mac0"].kind, listed["mac0"].mode) == ("macvlan", "bridge")

    during = k.snapshot()
    rows = {(row["ns"], row["name"]): row for row in during["links"]}
    bond_row = rows[(host.path, "bond0")]
    assert bond_row["bond"]["slaves"] == sorted(
        f"{host.path}#{m.ifindex}" for m in members
    ) or sorted(bond_row["bond"]["slaves"]) == sorted(f"{host.path}#{m.ifindex}" for m in members)
    assert rows[(pod.path, "ipv0")]["kind"] == "ipvlan"
    assert rows[(pod.path, "mac0")]["parent"] == f"{pod.path}#{other.ifindex}"
    assert rows[(host.path, "dum0.10")]["vlan_id"] == 10

    for ns, link in [
        (pod, macvlan),
        (pod, ipvlan),
        (pod, lower),
        (pod, other),
        (host, vlan),
        (host, dummy),
    ]:
        k.delete_link(ns, link.ifindex)
    for member in members:
        k.delete_link(host, member.ifindex)
    k.delete_link(host, bond.ifindex)
    k.delete_namespace("vm-kinds")
    assert diff(before, k.snapshot()) == []


def test_service_processes_reach_the_guest_through_the_relay(vm_lab: VmLab) -> None:
    """``kernel_url`` is the relay's socket: several clients at once, each answered."""
    clients = [open_kernel(vm_lab.kernel_url) for _ in range(3)]
    try:
        boot = vm_lab.kernel.boot_id()
        assert [c.boot_id() for c in clients] == [boot] * 3
        host = clients[0].host_namespace()
        made = clients[1].create_link(host, LinkSpec(kind="dummy", name="relay0"))
        found = clients[2].get_link(host, name="relay0")
        assert found is not None
        assert found.ifindex == made.ifindex
        clients[0].delete_link(host, made.ifindex)
        assert vm_lab.kernel.get_link(host, name="relay0") is None
    finally:
        for client in clients:
            close = getattr(client, "close", None)
            if close is not None:
                close()


def test_a_session_is_a_fresh_lab_and_leaves_the_guest_as_it_was(vm_lab: VmLab) -> None:
    """A lab session (what each crash run gets): the parents of the netns lab in the
    seed's random state, its own kernel URL; a VF lent to it, moved on into the
    session's pod, comes home when the session's namespaces die, under its own name."""
    k = vm_lab.kernel
    if k.sriov(PFS[0])["numvfs"] == 0:
        k.set_sriov_numvfs(PFS[0], VFS_PER_PF)
    vf = f"{PFS[0]}v0"
    root_before = k.snapshot()
    first = vm_lab.session(start_seed=11)
    second = vm_lab.session(start_seed=11, lend={vf: "enp3s0f0v0"})
    try:
        host = first.kernel.host_namespace()
        assert host != second.kernel.host_namespace(), "two sessions share a node"

        def parents(session: AgentSession) -> list[tuple[str, int, str, bool]]:
            node = session.kernel.host_namespace()
            links = {lk.name: lk for lk in session.kernel.list_links(node)}
            return [
                (n, links[n].mtu, links[n].mac, links[n].up)
                for n in (*PARENTS, "fveth0")
                if n in links
            ]

        assert len(parents(first)) == len(PARENTS) + 1
        assert parents(second) == parents(first), "one seed, one start state"
        # The lent VF is in the second session's node, and nowhere in the first's.
        node = second.kernel.host_namespace()
        lent = second.kernel.get_link(node, name="enp3s0f0v0")
        assert lent is not None
        assert lent.vf_of is not None
        assert first.kernel.find_device(str(lent.pci_address)) is None
        assert k.get_link(k.host_namespace(), name=vf) is None
        # Service processes reach the session through its own URL.
        service = open_kernel(second.kernel_url)
        try:
            assert service.host_namespace() == node
        finally:
            close = getattr(service, "close", None)
            if close is not None:
                close()
        # Into the session's pod, as the sriov plugin moves a VF.
        pod = second.kernel.add_namespace("pod-a")
        second.kernel.move_link(node, lent.ifindex, pod, new_name="net1")
        started = time.monotonic()
        for _ in range(10):
            second.kernel.get_link(pod, name="net1")
        round_trip = (time.monotonic() - started) / 10
    finally:
        first.close()
        second.close()
    assert diff(root_before, k.snapshot()) == []
    assert vm_lab.sessions == []
    print(
        f"\nvm session: open {first.open_seconds:.2f} s / {second.open_seconds:.2f} s (lent VF), "
        f"close {first.close_seconds:.2f} s / {second.close_seconds:.2f} s, "
        f"get_link round trip {round_trip * 1000:.0f} ms"
    )
