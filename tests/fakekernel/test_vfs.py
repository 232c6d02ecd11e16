"""PCI devices, PFs and the VF table a PF driver keeps."""

from __future__ import annotations

import errno

import pytest

from fakekernel import FakeKernelModel
from fakekernel._nics import profile
from plugins.kernel import KernelError, LinkChanges, LinkSpec, NsRef, VFChanges, VFConfig

from .helpers import PF_PCI, hardware, kernel_error, link


def pf(m: FakeKernelModel, host: NsRef) -> int:
    return link(m, host, "enp3s0f0").ifindex


def test_devices_cannot_be_deleted(m: FakeKernelModel, host: NsRef) -> None:
    for name in ("enp3s0f0", "enp3s0f0v0", "eth9"):
        with kernel_error(errno.EOPNOTSUPP):  # no rtnl_link_ops->dellink
            m.delete_link(host, link(m, host, name).ifindex)


def test_devices_carry_pci_identity_and_are_found_anywhere(
    m: FakeKernelModel, host: NsRef, pod: NsRef
) -> None:
    vf = link(m, host, "enp3s0f0v1")
    assert (vf.kind, vf.pci_address, vf.vf_of, vf.perm_mac) == (
        "device",
        "0000:03:10.2",
        (PF_PCI, 1),
        "02:00:00:03:10:02",
    )
    m.move_link(host, vf.ifindex, pod, new_name="net1")
    found = m.find_device("0000:03:10.2")
    assert found is not None
    assert (found.name, found.ns) == ("net1", pod)
    assert m.find_device("0000:99:00.0") is None


def test_vf_table_reports_none_for_what_the_nic_cannot_do() -> None:
    m = FakeKernelModel()
    hardware(m, caps=("trust",))
    host = m.host_namespace()
    assert m.get_vfs(host, pf(m, host))[1] == VFConfig(1, "00:00:00:00:00:00", trust=False)


def test_vf_table_defaults(m: FakeKernelModel, host: NsRef) -> None:
    assert m.get_vfs(host, pf(m, host))[0] == VFConfig(
        0, "00:00:00:00:00:00", 0, 0, "802.1Q", True, False, 0, 0, "auto"
    )


@pytest.mark.parametrize(
    "changes",
    [
        VFChanges(trust=True),
        VFChanges(spoofchk=False),
        VFChanges(link_state="enable"),
        VFChanges(max_tx_rate=100),
    ],
)
def test_unsupported_vf_settings_are_eopnotsupp(changes: VFChanges) -> None:
    m = FakeKernelModel()
    hardware(m, caps=())
    host = m.host_namespace()
    with kernel_error(errno.EOPNOTSUPP):  # no ndo_set_vf_* for it
        m.set_vf(host, link(m, host, "enp3s0f0").ifindex, 9, changes)


def test_vf_mac_rules_and_the_vf_netdev_follows(m: FakeKernelModel, host: NsRef) -> None:
    with kernel_error(errno.EINVAL):
        m.set_vf(host, pf(m, host), 0, VFChanges(mac="01:00:5e:00:00:01"))
    with kernel_error(errno.EINVAL):
        m.set_vf(host, pf(m, host), 0, VFChanges(mac="zz"))
    m.set_vf(host, pf(m, host), 0, VFChanges(mac="02:12:34:56:78:9a"))
    assert m.get_vfs(host, pf(m, host))[0].mac == "02:12:34:56:78:9a"
    assert link(m, host, "enp3s0f0v0").mac == "02:12:34:56:78:9a"
    m.set_vf(host, pf(m, host), 0, VFChanges(mac="00:00:00:00:00:00"))  # clears
    assert m.get_vfs(host, pf(m, host))[0].mac == "00:00:00:00:00:00"
    assert link(m, host, "enp3s0f0v0").mac == "02:12:34:56:78:9a"


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        (VFChanges(vlan=4096), errno.EINVAL),
        (VFChanges(vlan=10, qos=8), errno.EINVAL),
        (VFChanges(qos=3), errno.EINVAL),  # qos without a vlan
        (VFChanges(vlan=10, vlan_proto="802.1X"), errno.EPROTONOSUPPORT),
    ],
)
def test_vf_vlan_rules(m: FakeKernelModel, host: NsRef, changes: VFChanges, code: int) -> None:
    with kernel_error(code):
        m.set_vf(host, pf(m, host), 0, changes)


def test_vf_vlan_with_qos_and_8021ad(m: FakeKernelModel, host: NsRef) -> None:
    m.set_vf(host, pf(m, host), 0, VFChanges(vlan=10, qos=3, vlan_proto="802.1ad"))
    vf = m.get_vfs(host, pf(m, host))[0]
    assert (vf.vlan, vf.qos, vf.vlan_proto) == (10, 3, "802.1ad")
    no_qinq = FakeKernelModel()
    hardware(no_qinq, caps=("trust",))
    h = no_qinq.host_namespace()
    with kernel_error(errno.EPROTONOSUPPORT):
        no_qinq.set_vf(h, pf(no_qinq, h), 0, VFChanges(vlan=10, vlan_proto="802.1ad"))


def test_vf_rate_rules(m: FakeKernelModel, host: NsRef) -> None:
    with kernel_error(errno.EINVAL):
        m.set_vf(host, pf(m, host), 0, VFChanges(min_tx_rate=200, max_tx_rate=100))
    m.set_vf(host, pf(m, host), 0, VFChanges(min_tx_rate=200))  # max 0: unlimited
    m.set_vf(host, pf(m, host), 0, VFChanges(max_tx_rate=1000))
    vf = m.get_vfs(host, pf(m, host))[0]
    assert (vf.min_tx_rate, vf.max_tx_rate) == (200, 1000)


def test_vf_link_state_values(m: FakeKernelModel, host: NsRef) -> None:
    with kernel_error(errno.EINVAL):
        m.set_vf(host, pf(m, host), 0, VFChanges(link_state="on"))
    m.set_vf(host, pf(m, host), 0, VFChanges(link_state="disable", trust=True, spoofchk=False))
    vf = m.get_vfs(host, pf(m, host))[0]
    assert (vf.link_state, vf.trust, vf.spoofchk) == ("disable", True, False)


def test_vf_index_out_of_range_is_einval(m: FakeKernelModel, host: NsRef) -> None:
    for index in (2, -1):
        with kernel_error(errno.EINVAL):
            m.set_vf(host, pf(m, host), index, VFChanges(trust=True))


def test_only_a_pf_has_vfs(m: FakeKernelModel, host: NsRef) -> None:
    vf = link(m, host, "enp3s0f0v0").ifindex
    assert m.get_vfs(host, vf) == []
    with kernel_error(errno.EOPNOTSUPP):
        m.set_vf(host, vf, 0, VFChanges(trust=True))


def test_vf_settings_apply_one_by_one(m: FakeKernelModel, host: NsRef) -> None:
    with kernel_error(errno.EINVAL):  # MAC goes first and stays; the vlan is refused
        m.set_vf(host, pf(m, host), 1, VFChanges(mac="02:00:00:00:00:77", vlan=5000))
    vf = m.get_vfs(host, pf(m, host))[1]
    assert (vf.mac, vf.vlan) == ("02:00:00:00:00:77", 0)


def _igb(*, answered_at_probe: bool) -> tuple[FakeKernelModel, NsRef, int]:
    """An igb PF, up, with one VF made while it is up."""
    m = FakeKernelModel()
    nic = profile("igb", vf_probe_answered=answered_at_probe)
    pf = m.add_pf(
        "enp1s0",
        pci_address="0000:01:00.0",
        mac="02:00:00:00:01:00",
        capabilities=nic.capabilities,
        vfs=[],
        nic=nic,
    )
    host = m.host_namespace()
    m.set_link(host, pf.ifindex, LinkChanges(up=True))
    m.set_sriov_numvfs("enp1s0", 1)
    return m, host, pf.ifindex


def _vlan_on_vf(m: FakeKernelModel, host: NsRef) -> int:
    vf = link(m, host, "enp1s0v0")
    try:
        m.create_link(host, LinkSpec(kind="vlan", name="vf.5", parent=vf.ifindex, vlan_id=5))
    except KernelError as exc:
        return exc.code
    m.delete_link(host, link(m, host, "vf.5").ifindex)
    return 0


def test_igb_answers_a_vf_after_its_reset_with_the_pf_up() -> None:
    """igb (6.1): a VF made while its PF is up is not clear to send; its first reset with
    the PF up makes it so (VLANs taken, its address in the VF table), its PF going down
    takes that back."""
    m, host, pf = _igb(answered_at_probe=False)
    vf = link(m, host, "enp1s0v0")
    assert _vlan_on_vf(m, host) == errno.EINVAL
    assert m.get_vfs(host, pf)[0].mac == "00:00:00:00:00:00"
    m.set_link(host, vf.ifindex, LinkChanges(mtu=1400))  # a reset
    assert _vlan_on_vf(m, host) == 0
    assert m.get_vfs(host, pf)[0].mac == vf.mac
    m.set_link(host, pf, LinkChanges(up=False))
    m.set_link(host, pf, LinkChanges(up=True))
    assert _vlan_on_vf(m, host) == errno.EINVAL


def test_igb_of_612_answers_a_vf_made_while_the_pf_is_up() -> None:
    m, host, pf = _igb(answered_at_probe=True)
    assert _vlan_on_vf(m, host) == 0
    assert m.get_vfs(host, pf)[0].mac == link(m, host, "enp1s0v0").mac
