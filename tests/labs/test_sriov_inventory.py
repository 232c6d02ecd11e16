"""The SR-IOV lab's inventory format: loading, one line per problem (path + rule)."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labs.sriov import CAPABILITIES, InventoryError, load_inventory
from plugins.sdk import DocumentSchema

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = REPO / "inventories"

GOOD = """\
all:
  vars:
    ansible_user: root
    ansible_ssh_private_key_file: keys/id_ed25519
  children:
    sriov_hosts:
      hosts:
        h1:
          ansible_host: 192.0.2.1
          sriov_pfs:
            - pci: "0000:01:00.0"
              netdev: enp1s0
              vfs: 4
              model: Intel 82576
              driver: igb
              vf_driver: igbvf
              capabilities: [vf_spoofchk, bond_of_vfs]
              peer: {host: h2, netdev: eth9}
        h2:
          ansible_host: 192.0.2.2
          ansible_port: 2200
          ansible_user: lab
          ansible_ssh_private_key_file: /keys/h2
          sriov_host_netns: /run/netns/host
          sriov_pfs:
            - pci: "0000:3b:00.0"
              vfs: 8
              model: Intel E810
              driver: ice
              vf_driver: iavf
              capabilities: []
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lab.yml"
    path.write_text(text)
    return path


def _lines(tmp_path: Path, text: str) -> tuple[str, ...]:
    path = _write(tmp_path, text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert str(info.value).startswith(f"{path}: ")
    return info.value.lines


def test_a_good_inventory_loads_with_shared_vars_and_defaults(tmp_path: Path) -> None:
    inventory = load_inventory(_write(tmp_path, GOOD))
    h1, h2 = inventory.hosts
    assert (h1.name, h1.address, h1.port, h1.user) == ("h1", "192.0.2.1", 22, "root")
    assert h1.key_file == tmp_path / "keys" / "id_ed25519"  # relative to the inventory
    assert h1.kernel_url == "linux:///proc/1/ns/net"
    (pf,) = h1.pfs
    assert (pf.pci, pf.netdev, pf.vfs, pf.driver, pf.vf_driver) == (
        "0000:01:00.0",
        "enp1s0",
        4,
        "igb",
        "igbvf",
    )
    assert pf.can("bond_of_vfs")
    assert not pf.can("vlan_on_bond")
    assert pf.peer is not None
    assert (pf.peer.host, pf.peer.netdev) == ("h2", "eth9")
    assert (h2.port, h2.user, str(h2.key_file)) == (2200, "lab", "/keys/h2")
    assert h2.kernel_url == "linux:///run/netns/host"
    assert h2.pf("0000:3b:00.0").netdev is None
    assert inventory.host("h2") is h2


@pytest.mark.parametrize("name", ["emulated.yml", "emulated-2.yml", "example-lab.yml"])
def test_the_shipped_inventories_load(name: str) -> None:
    inventory = load_inventory(INVENTORIES / name)
    assert inventory.hosts
    for host in inventory:
        for pf in host.pfs:
            assert pf.capabilities <= set(CAPABILITIES)


def test_the_emulated_inventory_is_two_igb_pfs_of_four_vfs_on_localhost() -> None:
    (host,) = load_inventory(INVENTORIES / "emulated.yml").hosts
    assert (host.address, host.port, host.user) == ("127.0.0.1", 2222, "root")
    assert str(host.key_file) == "/var/lib/dranp/sriov-host/id_ed25519"
    assert [(pf.driver, pf.vf_driver, pf.vfs) for pf in host.pfs] == [("igb", "igbvf", 4)] * 2


def test_capabilities_in_the_schema_are_the_public_list() -> None:
    schema = DocumentSchema.packaged("labs.sriov", "sriov-inventory.schema.json").schema
    items = schema["$defs"]["pf"]["properties"]["capabilities"]["items"]
    assert tuple(items["enum"]) == CAPABILITIES


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        (
            "vfs: 4",
            "vfs: 0",
            "$.all.children.sriov_hosts.hosts.h1.sriov_pfs[0].vfs: must be >= 1, got 0 [range]",
        ),
        (
            '"0000:01:00.0"',
            '"01:00.0"',
            "$.all.children.sriov_hosts.hosts.h1.sriov_pfs[0].pci: must match pattern",
        ),
        (
            "[vf_spoofchk, bond_of_vfs]",
            "[vf_spoofchk, teleport]",
            "$.all.children.sriov_hosts.hosts.h1.sriov_pfs[0].capabilities[1]: must be one of",
        ),
        (
            "ansible_port: 2200",
            "ansible_prot: 2200",
            "$.all.children.sriov_hosts.hosts.h2.ansible_prot: unknown key 'ansible_prot' "
            "[unknown-key]",
        ),
        (
            "ansible_port: 2200",
            "ansible_port: '2200'",
            "$.all.children.sriov_hosts.hosts.h2.ansible_port: must be of type integer",
        ),
        (
            "sriov_host_netns: /run/netns/host",
            "sriov_host_netns: run/netns/host",
            "$.all.children.sriov_hosts.hosts.h2.sriov_host_netns: must match pattern",
        ),
    ],
)
def test_a_schema_problem_is_one_line_with_path_and_rule(
    tmp_path: Path, old: str, new: str, line: str
) -> None:
    (got,) = _lines(tmp_path, GOOD.replace(old, new, 1))
    assert got.startswith(line)
    assert got.endswith("]")


def test_every_problem_is_its_own_line(tmp_path: Path) -> None:
    text = GOOD.replace("vfs: 4", "vfs: -1").replace("driver: ice", "driver: Ice")
    text = text.replace("          ansible_host: 192.0.2.1\n", "          colour: red\n")
    lines = _lines(tmp_path, text)
    # the missing ansible_host is the reader's check, made once the shape is right
    assert len(lines) == 3
    assert all(line.startswith("$.all.children.sriov_hosts.hosts.h") for line in lines)
    assert {line.rsplit("[", 1)[1] for line in lines} == {"range]", "pattern]", "unknown-key]"}


def test_a_connection_key_given_nowhere_is_required(tmp_path: Path) -> None:
    text = GOOD.replace("    ansible_user: root\n", "")
    assert _lines(tmp_path, text) == (
        "$.all.children.sriov_hosts.hosts.h1.ansible_user: missing 'ansible_user': neither "
        "the host nor all.vars / sriov_hosts.vars give it [required]",
    )


def test_a_pci_address_twice_on_a_host_and_a_peer_naming_no_host(tmp_path: Path) -> None:
    pf = GOOD.split("          sriov_pfs:\n")[1].split("        h2:", maxsplit=1)[0]
    text = GOOD.replace(pf, pf + pf.replace("enp1s0", "enp1s1"), 1).replace("host: h2", "host: h3")
    assert _lines(tmp_path, text) == (
        "$.all.children.sriov_hosts.hosts.h1.sriov_pfs[1].pci: '0000:01:00.0' is already "
        "PF 0's [unique]",
        "$.all.children.sriov_hosts.hosts.h1.sriov_pfs[0].peer.host: no host 'h3' in "
        "sriov_hosts [reference]",
        "$.all.children.sriov_hosts.hosts.h1.sriov_pfs[1].peer.host: no host 'h3' in "
        "sriov_hosts [reference]",
    )


def test_no_hosts_and_a_missing_group(tmp_path: Path) -> None:
    assert _lines(tmp_path, "all:\n  children:\n    sriov_hosts:\n      hosts: {}\n") == (
        "$.all.children.sriov_hosts.hosts: must have at least 1 properties, got 0 [size]",
    )
    assert _lines(tmp_path, "all:\n  children:\n    others:\n      hosts: {}\n") == (
        "$.all.children.others: unknown key 'others' [unknown-key]",
        "$.all.children.sriov_hosts: missing required field 'sriov_hosts' [required]",
    )


def test_bad_yaml_and_a_missing_file_are_one_line(tmp_path: Path) -> None:
    assert _lines(tmp_path, "all: {x: 1, x: 2}\n") == (
        "line 1, column 13: duplicate key 'x' (first at line 1)",
    )
    missing = tmp_path / "absent.yml"
    with pytest.raises(InventoryError) as info:
        load_inventory(missing)
    assert str(info.value) == f"{missing}: No such file or directory"


@pytest.mark.skipif(
    shutil.which("ansible-inventory") is None
    and not (Path(sys.executable).parent / "ansible-inventory").exists(),
    reason="ansible-core is not installed",
)
@pytest.mark.parametrize("name", ["emulated.yml", "emulated-2.yml", "example-lab.yml"])
def test_ansible_reads_the_shipped_inventories_the_same_way(name: str) -> None:
    program = Path(sys.executable).parent / "ansible-inventory"
    out = subprocess.run(
        [str(program), "-i", str(INVENTORIES / name), "--list"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    listed = json.loads(out)
    inventory = load_inventory(INVENTORIES / name)
    assert sorted(listed["sriov_hosts"]["hosts"]) == sorted(h.name for h in inventory)
    for host in inventory:
        facts = listed["_meta"]["hostvars"][host.name]
        assert facts["ansible_host"] == host.address
        assert [pf["pci"] for pf in facts["sriov_pfs"]] == [pf.pci for pf in host.pfs]


def test_no_product_module_loads_yaml_but_the_sdk_loader() -> None:
    """One YAML loader: a second ``yaml.safe_load`` would accept what the SDK refuses."""
    offenders = []
    for root in ("plugins", "harness", "conformance", "fakekernel", "labs", "examples"):
        for path in (REPO / root).rglob("*.py"):
            if path.match("plugins/sdk/_yaml.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "yaml"
                    and node.attr in {"load", "safe_load", "full_load", "unsafe_load", "load_all"}
                ):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: yaml.{node.attr}")
    assert offenders == []


def test_hosts_joined_by_a_traffic_peer_are_one_group(tmp_path: Path) -> None:
    """h1's PF is cabled to h2: one process must hold both. A third host with its peer on
    itself runs apart (harness.rig gives each group an xdist worker)."""
    alone = """\
        h3:
          ansible_host: 192.0.2.3
          sriov_pfs:
            - pci: "0000:05:00.0"
              vfs: 2
              model: Intel 82576
              driver: igb
              vf_driver: igbvf
              capabilities: []
              peer: {netdev: eth1}
"""
    inventory = load_inventory(_write(tmp_path, GOOD + alone))
    assert inventory.groups() == [("h1", "h2"), ("h3",)]
    assert inventory.group_of("h2") == ("h1", "h2")
    assert [h.name for h in inventory.only(["h3"])] == ["h3"]
    with pytest.raises(KeyError, match="no host 'h9'"):
        inventory.only(["h9"])


def test_hosts_without_peers_are_groups_of_one(tmp_path: Path) -> None:
    text = GOOD.replace("              peer: {host: h2, netdev: eth9}\n", "")
    assert load_inventory(_write(tmp_path, text)).groups() == [("h1",), ("h2",)]
