"""Which port a host's traffic check pings (``labs.sriov.traffic_peer``): the one every
PF of the host reaches, since a bond of one VF per PF fails over from one PF to the
other; a host whose PFs name none, or different ones, has no check, and says why."""

from __future__ import annotations

from pathlib import Path

from labs.sriov import PeerPort, load_inventory, traffic_peer

INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"


def test_the_emulated_hosts_pfs_share_the_hubs_peer_port() -> None:
    (host,) = load_inventory(INVENTORIES / "emulated.yml").hosts
    assert traffic_peer(host) == (PeerPort("emulated-igb", "enp3s0"), "")


def test_the_example_labs_e810_reaches_the_connectx_port() -> None:
    hosts = {h.name: h for h in load_inventory(INVENTORIES / "example-lab.yml").hosts}
    assert traffic_peer(hosts["e810-a"]) == (PeerPort("cx6-a", "enp129s0f0np0"), "")


def test_no_peer_or_different_peers_is_one_line_naming_the_host(tmp_path: Path) -> None:
    text = (INVENTORIES / "emulated.yml").read_text()
    without = tmp_path / "without.yml"
    without.write_text(text.replace("peer: {netdev: enp3s0}", ""))
    (host,) = load_inventory(without).hosts
    assert traffic_peer(host) == (
        None,
        "emulated-igb: no PF names a traffic peer port (inventory: peer)",
    )
    different = tmp_path / "different.yml"
    different.write_text(text.replace("peer: {netdev: enp3s0}", "peer: {netdev: enp9s0}", 1))
    (host,) = load_inventory(different).hosts
    peer, why = traffic_peer(host)
    assert peer is None
    assert why.startswith("emulated-igb: a bond of one VF per PF needs one peer port")
    assert "0000:01:00.0 -> " in why
    assert "enp9s0" in why
