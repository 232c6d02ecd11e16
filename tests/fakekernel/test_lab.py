"""Lab descriptions: the default lab, the derived identities, and clear errors."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakekernel import DEFAULT_LAB, FakeKernelModel, LabError, build_model, load_lab
from fakekernel._links import SETUP_MTU_BOUNDS
from fakekernel._nics import DRIVERS
from fakekernel._vfs import CAPABILITIES
from fakekernel.lab import (
    LAB_SCHEMA,
    parse_lab_yaml,
    plant_pod_interface,
    randomize_start_state,
)
from fakekernel.model import diff
from plugins.kernel import KernelError, Link, LinkChanges, NsRef, VFChanges, VFConfig
from plugins.sdk import DocumentSchema

from .helpers import link


def test_the_default_lab() -> None:
    m = load_lab(DEFAULT_LAB)
    host = m.host_namespace()
    assert m.boot_id() == "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"
    names = [ln.name for ln in m.list_links(host)]
    assert names == [
        "enp3s0f0",
        *(f"enp3s0f0v{i}" for i in range(4)),
        "enp3s0f1",
        *(f"enp3s0f1v{i}" for i in range(4)),
        "enp3s0f2",
        "foreign0",
    ]
    pf0, pf1 = link(m, host, "enp3s0f0"), link(m, host, "enp3s0f1")
    assert (pf0.pci_address, pf1.pci_address, pf0.up) == ("0000:03:00.0", "0000:03:00.1", True)
    assert [link(m, host, f"enp3s0f0v{i}").pci_address for i in range(4)] == [
        "0000:03:10.0",
        "0000:03:10.2",
        "0000:03:10.4",
        "0000:03:10.6",
    ]
    assert link(m, host, "enp3s0f1v3").vf_of == ("0000:03:00.1", 3)
    assert m.get_vfs(host, pf0.ifindex)[0].link_state == "auto"
    assert m.get_vfs(host, pf1.ifindex)[0] == VFConfig(
        0, "00:00:00:00:00:00", spoofchk=True, trust=False, min_tx_rate=0, max_tx_rate=0
    )  # the variant without link-state control
    shared = link(m, host, "enp3s0f2")
    assert (shared.mtu, shared.up, shared.pci_address) == (9000, True, "0000:03:00.2")
    foreign = link(m, host, "foreign0")
    assert (foreign.kind, foreign.alias) == ("dummy", "foreign")


def test_labs_build_identically() -> None:
    assert load_lab(DEFAULT_LAB).snapshot() == load_lab(DEFAULT_LAB).snapshot()


def test_foreign_links_namespaces_and_options() -> None:
    m = build_model(
        {
            "live_rename": True,
            "namespaces": ["other"],
            "devices": [{"name": "eth7", "pci": "0000:07:00.0", "up": True}],
            "links": [
                {"kind": "bond", "name": "fbond", "bond": {"mode": "active-backup"}},
                {"kind": "veth", "name": "fa", "peer_name": "fb", "peer_namespace": "other"},
                {"kind": "macvlan", "name": "fmv", "parent": "eth7", "mode": "bridge"},
                {"kind": "vlan", "name": "eth7.9", "parent": "eth7", "vlan_id": 9, "up": True},
                {"kind": "dummy", "name": "fd", "master": "fbond", "namespace": None},
                {
                    "kind": "ipvlan",
                    "name": "fipv",
                    "namespace": "other",
                    "parent": "fb",
                    "parent_namespace": "other",
                },
            ],
        }
    )
    host, other = m.host_namespace(), m.namespace("other")
    assert link(m, host, "fd").master == link(m, host, "fbond").ifindex
    assert link(m, host, "eth7.9").up
    assert link(m, other, "fipv").mode == "l3"
    assert m.snapshot()["live_rename"] is True


@pytest.mark.parametrize(
    ("desc", "message"),
    [
        ({"pfss": []}, "lab.pfss: unknown key 'pfss' [unknown-key]"),
        ({"pfs": [{"num_vfs": 2}]}, "lab.pfs[0].name: missing required field 'name' [required]"),
        ({"pfs": [{"name": "eth0"}]}, "lab.pfs[0].pci: required, 'eth0' does not encode"),
        ({"pfs": [{"name": "p", "pci": "3:0.0"}]}, "lab.pfs[0].pci: '3:0.0' is not DDDD:BB:SS.F"),
        (
            {"pfs": [{"name": "enp3s0f0", "num_vfs": "4"}]},
            'lab.pfs[0].num_vfs: must be of type integer or null, got string "4" [type]',
        ),
        (
            {"pfs": [{"name": "enp3s0f0", "num_vfs": True}]},
            "lab.pfs[0].num_vfs: must be of type integer or null, got boolean true [type]",
        ),
        ({"pfs": [{"name": "enp3s0f0", "num_vfs": 999}]}, "lab.pfs[0].num_vfs: must be <= 256"),
        ({"pfs": [{"name": "enp3s0f0", "nic": "x"}]}, "lab.pfs[0].nic: no NIC variant 'x'"),
        (
            {"nics": {"x": {"capabilities": ["warp"]}}},
            'lab.nics.x.capabilities[0]: must be one of ["link_state", ',
        ),
        (
            {"pfs": [{"name": "enp3s0f0"}, {"name": "enp3s0f0", "pci": "0000:09:00.0"}]},
            "lab.pfs[1]: the kernel refused: EEXIST",
        ),
        ({"devices": [{"name": "enp3s0f0", "mtu": 99999}]}, "lab.devices[0]: the kernel refused"),
        (
            {"links": [{"kind": "tun", "name": "t"}]},
            'lab.links[0].kind: must be one of ["bond", "bridge", "dummy", ',
        ),
        (
            {"links": [{"kind": "vlan", "name": "v", "parent": "x"}]},
            "lab.links[0].parent: no link",
        ),
        ({"links": [{"kind": "dummy", "name": "d", "namespace": "x"}]}, "namespace 'x' is not"),
        ({"links": [{"kind": "vlan", "name": "v"}]}, "lab.links[0]: the kernel refused: EINVAL"),
        ({"links": [{"kind": "dummy", "name": "d", "master": "x"}]}, "lab.links[0].master"),
        ({"links": ["dummy"]}, "lab.links[0]: must be of type object, got string"),
        ({"namespaces": ["a/b"]}, "lab.namespaces[0]: 'a/b': the kernel refused: EINVAL"),
    ],
)
def test_invalid_labs_say_where_and_why(desc: dict[str, Any], message: str) -> None:
    with pytest.raises(LabError) as info:
        build_model(desc)
    assert message in str(info.value)


def test_every_shape_problem_is_reported_at_once_one_line_each() -> None:
    with pytest.raises(LabError) as info:
        build_model({"pfs": [{"name": 3, "bogus": 1}], "links": [{"kind": "dummy"}]})
    assert str(info.value).split("; ") == [
        "lab.pfs[0].bogus: unknown key 'bogus' [unknown-key]",
        "lab.links[0].name: missing required field 'name' [required]",
        "lab.pfs[0].name: must be of type string, got integer 3 [type]",
    ]


def test_a_lab_file_error_names_the_file_and_the_path(tmp_path: Path) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text("pfs:\n  - {name: enp3s0f0, num_vfs: many}\n")
    with pytest.raises(LabError) as info:
        load_lab(path)
    assert str(info.value) == (
        f'{path}: lab.pfs[0].num_vfs: must be of type integer or null, got string "many" [type]'
    )
    path.write_text("links: [{kind: vlan, name: v, parent: x}]\n")
    with pytest.raises(LabError, match=f"^{path}: lab.links\\[0\\].parent: no link 'x'"):
        load_lab(path)


def test_the_schema_lists_what_the_fake_kernel_knows() -> None:
    """The schema repeats two sets of the fake kernel (JSON cannot import them)."""
    schema = DocumentSchema.packaged("fakekernel", LAB_SCHEMA).schema
    definitions = schema["$defs"]
    nic_caps = definitions["nic"]["properties"]["capabilities"]["items"]["enum"]
    assert set(nic_caps) == CAPABILITIES
    assert set(definitions["link"]["properties"]["kind"]["enum"]) == set(SETUP_MTU_BOUNDS)
    assert set(definitions["nic"]["properties"]["driver"]["enum"]) == set(DRIVERS)


def test_a_pf_can_be_an_igb() -> None:
    """``nic: igb`` (a built-in profile) or a variant with ``driver: igb`` and overrides:
    totalvfs 7, VF addresses made up by the VF driver, no link-state control but a
    reported "auto", an address set through the PF applied at the VF's next reset."""
    model = build_model(
        {
            "loopback": True,
            "nics": {"small-igb": {"driver": "igb", "totalvfs": 2}},
            "pfs": [
                {"name": "enp1s0", "pci": "0000:01:00.0", "nic": "igb", "num_vfs": 1},
                {"name": "enp2s0", "pci": "0000:02:00.0", "nic": "small-igb", "cable": False},
            ],
        }
    )
    host = model.host_namespace()
    assert model.get_link(host, name="lo") is not None
    assert model.sriov_totalvfs("enp1s0") == 7
    assert model.sriov_totalvfs("enp2s0") == 2
    vf = model.get_link(host, name="enp1s0v0")
    assert vf is not None
    assert vf.pci_address == "0000:01:10.0"
    assert vf.mac == vf.perm_mac  # made up by igbvf, which its probe's reset makes permanent
    pf = model.get_link(host, name="enp1s0")
    assert pf is not None
    assert model.get_vfs(host, pf.ifindex)[0].link_state == "auto"
    with pytest.raises(KernelError) as refused:
        model.set_sriov_numvfs("enp2s0", 3)
    assert refused.value.code == errno.ERANGE
    assert model.set_sriov_numvfs("enp2s0", 2) == ["enp2s0v0", "enp2s0v1"]
    with pytest.raises(LabError, match=r"lab\.nics\.x\.driver: must be one of"):
        build_model({"nics": {"x": {"driver": "e1000"}}})


def test_udev_gives_vfs_a_persistent_address() -> None:
    """``mac_address_policy: persistent`` (Debian's udev): a VF netdev gets an address of
    its name, the same when its VF is made again; its permanent address is igbvf's. With
    ``none`` (the kernel alone) a VF made again gets a fresh address."""

    def twice(policy: str) -> tuple[Link, Link]:
        model = build_model(
            {
                "mac_address_policy": policy,
                "pfs": [{"name": "enp1s0", "pci": "0000:01:00.0", "nic": "igb", "num_vfs": 1}],
            }
        )
        host = model.host_namespace()
        first = model.get_link(host, name="enp1s0v0")
        model.set_sriov_numvfs("enp1s0", 0)
        model.set_sriov_numvfs("enp1s0", 1)
        again = model.get_link(host, name="enp1s0v0")
        assert first is not None
        assert again is not None
        return first, again

    first, again = twice("persistent")
    assert first.mac == again.mac
    assert first.perm_mac not in (first.mac, again.perm_mac)
    first, again = twice("none")
    assert first.mac != again.mac
    assert (first.perm_mac, again.perm_mac) == (first.mac, again.mac)
    with pytest.raises(LabError, match=r"mac_address_policy"):
        build_model({"mac_address_policy": "random"})


def test_yaml_problems(tmp_path: Path) -> None:
    with pytest.raises(LabError, match="duplicate key 'pfs'"):
        parse_lab_yaml("pfs: []\npfs: []\n")
    with pytest.raises(LabError, match="a lab is a mapping"):
        parse_lab_yaml("- 1\n")
    with pytest.raises(LabError, match="not valid YAML"):
        parse_lab_yaml("a: [\n")
    with pytest.raises(LabError, match="No such file"):
        load_lab(tmp_path / "missing.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert [ln.name for ln in load_lab(empty).list_links(load_lab(empty).host_namespace())] == []


# -- random starting states ----------------------------------------------------------------

SEEDS = range(24)


def randomized(seed: int, lab: Path = DEFAULT_LAB) -> FakeKernelModel:
    model = load_lab(lab)
    randomize_start_state(model, seed)
    return model


def test_a_random_start_state_is_the_same_for_the_same_seed_only() -> None:
    assert randomized(7).snapshot() == randomized(7).snapshot()
    assert diff(randomized(7).snapshot(), randomized(8).snapshot()) != []


def test_every_attribute_of_every_device_varies_across_seeds() -> None:
    """Over a few seeds each device (and each VF's table entry) takes more than one value
    of every attribute a restore could get wrong, so no restore bug hides behind one."""
    seen: dict[tuple[str, str], set[Any]] = {}
    for seed in SEEDS:
        snapshot = randomized(seed).snapshot()
        for lk in snapshot["links"]:
            if lk["kind"] == "device":
                for field in ("up", "mtu", "mac"):
                    seen.setdefault((lk["name"], field), set()).add(lk[field])
        for pf in snapshot["pfs"]:
            for vf in pf["vfs"]:
                for field in ("mac", "vlan", "spoofchk", "trust", "link_state", "max_tx_rate"):
                    key = (f"{pf['pci']}#{vf['vf_index']}", field)
                    seen.setdefault(key, set()).add(vf[field])
    constant = sorted(key for key, values in seen.items() if len(values) < 2)
    # The NIC variant without link-state control keeps reporting none.
    assert all(key[0].startswith("0000:03:00.1#") for key in constant if key[1] == "link_state")
    assert [key for key in constant if key[1] != "link_state"] == []


def test_a_random_start_state_is_one_the_plugins_and_a_real_nic_accept() -> None:
    for seed in SEEDS:
        m = randomized(seed)
        host = m.host_namespace()
        links = {lk.name: lk for lk in m.list_links(host)}
        for lk in links.values():
            if lk.kind == "device":
                assert lk.mtu >= 1500, (seed, lk.name)  # the topologies ask 1500 of them
            if lk.vf_of is not None:
                pf = m.find_device(lk.vf_of[0])
                assert pf is not None
                assert lk.mtu <= pf.mtu, (seed, lk.name)
        for pf_name in ("enp3s0f0", "enp3s0f1"):
            for vf in m.get_vfs(host, links[pf_name].ifindex):
                assert vf.qos == 0  # a VLAN set alone keeps the QoS, which needs a VLAN
                assert vf.min_tx_rate is not None
                assert vf.max_tx_rate is not None
                assert vf.max_tx_rate == 0 or vf.min_tx_rate <= vf.max_tx_rate
        assert m.get_vfs(host, links["enp3s0f1"].ifindex)[0].link_state is None
        foreign = {n: lk for n, lk in links.items() if lk.alias == "foreign"}
        assert {"fveth0", "fmacvlan0", "foreign0"} <= set(foreign)
        lower = m.get_link(host, ifindex=foreign["fmacvlan0"].parent or 0)
        assert lower is not None
        assert lower.name in ("enp3s0f0", "enp3s0f1")  # never enp3s0f2


def test_a_device_keeps_its_random_state_when_the_lab_gains_another(tmp_path: Path) -> None:
    bigger = tmp_path / "bigger.yaml"
    desc = parse_lab_yaml(DEFAULT_LAB.read_text())
    desc["devices"] = [*desc["devices"], {"name": "enp9s0f0", "up": True}]
    bigger.write_text(yaml.safe_dump(desc))

    def devices(snapshot: dict[str, Any]) -> dict[str, Any]:
        return {lk["pci_address"]: lk for lk in snapshot["links"] if lk["kind"] == "device"}

    small, large = randomized(3).snapshot(), randomized(3, bigger).snapshot()
    assert devices(small) == {k: v for k, v in devices(large).items() if k != "0000:09:00.0"}
    assert small["pfs"] == large["pfs"]


def test_the_pod_interface_is_the_sandboxs_first_link_with_its_peer_at_home() -> None:
    m = randomized(5)
    pod = m.add_namespace("pod-a")
    eth0 = plant_pod_interface(m, pod, 5)
    assert (eth0.name, eth0.ifindex, eth0.kind) == ("eth0", 2, "veth")
    peer = m.get_link(m.host_namespace(), ifindex=eth0.peer or 0)
    assert peer is not None
    assert peer.peer == eth0.ifindex
    m.delete_namespace("pod-a")
    assert m.get_link(m.host_namespace(), name=peer.name) is None  # it dies with the pod


def test_a_qemu_igb_keeps_its_link_status_and_a_booted_host_has_lo_up() -> None:
    """``link_kept`` (QEMU's igb, opened once at boot): a VF rate is taken with the PF
    down, but only 0 (the speed the driver saw is gone with the PF); without it every
    rate waits for the PF's link. ``host_loopback_up``: the host's lo is up, other
    namespaces' are not; it needs ``loopback``. igb's spoof checking on a PF without VFs
    is EOPNOTSUPP."""

    def lab(**pf: Any) -> tuple[FakeKernelModel, NsRef, int]:
        model = build_model(
            {
                "loopback": True,
                "host_loopback_up": True,
                "namespaces": ["pod"],
                "pfs": [{"name": "enp1s0", "pci": "0000:01:00.0", "nic": "igb", **pf}],
            }
        )
        host = model.host_namespace()
        found = model.get_link(host, name="enp1s0")
        assert found is not None
        return model, host, found.ifindex

    def rate(model: FakeKernelModel, host: NsRef, pf: int, mbps: int) -> str:
        try:
            model.set_vf(host, pf, 0, VFChanges(max_tx_rate=mbps))
        except KernelError as exc:
            return errno.errorcode[exc.code]
        return "ok"

    kept, host, pf = lab(link_kept=True, num_vfs=1)
    assert (rate(kept, host, pf, 0), rate(kept, host, pf, 100)) == ("ok", "EINVAL")
    kept.set_link(host, pf, LinkChanges(up=True))
    assert rate(kept, host, pf, 100) == "ok"
    plain, host, pf = lab(num_vfs=1)
    assert (rate(plain, host, pf, 0), rate(plain, host, pf, 100)) == ("EINVAL", "EINVAL")
    lo = plain.get_link(host, name="lo")
    assert lo is not None
    assert lo.up
    pod_lo = plain.get_link(plain.namespace("pod"), name="lo")
    assert pod_lo is not None
    assert not pod_lo.up
    bare, host, pf = lab()
    with pytest.raises(KernelError) as refused:
        bare.set_vf(host, pf, 0, VFChanges(spoofchk=False))
    assert refused.value.code == errno.EOPNOTSUPP
    with pytest.raises(LabError, match=r"host_loopback_up: the lab has no loopback devices"):
        build_model({"host_loopback_up": True})
