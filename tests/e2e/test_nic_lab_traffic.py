"""Packets, not only netlink state: a ping across the bond of two VFs reaches the peer
port the inventory names, and goes on reaching it when the bond's active member fails.

On a NIC lab whose PFs are cabled to one peer port (the emulated SR-IOV host: both igb
PFs and an e1000e port on one QEMU hub; a real lab: the inventory's ``peer``), the
coordinator connects vf-bond-vlan (vf-bond where the NIC lacks ``vlan_on_bond``: igb
refuses the bond's VLAN, tests/e2e/test_nic_lab_topologies.py) with the real service
processes; the pod's data interface gets ``POD_ADDRESS`` and the peer port, lent into a
session of the machine that holds it (with a VLAN of the topology's id on it when the
pod's interface is that VLAN), ``PEER_ADDRESS``. A ping from the pod must be answered;
then, with the ping running, the bond's active member is set down (what a failed link
looks like to the bond's link monitor), the bond must make the other member active, and
replies must go on coming through it. Removal and unpreparation then leave the machines
as they were.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.pytest_plugin import RigStats
from labs import AgentLab, Lab
from plugins.kernel import LinkChanges, LinkSpec, NsRef
from plugins.sdk import CleanupStatus

from .node import Node, compiled

# Documentation addresses (RFC 5737): the packets never leave the machines' NICs.
POD_ADDRESS, PEER_ADDRESS, PREFIX = "192.0.2.1", "192.0.2.2", 24
PEER_NAME = "peer0"  # the peer port's name in its session's node
FIRST_REPLIES = 3  # answered pings that prove the path (the first waits on ARP)
AFTER_FAILOVER = 5  # replies through the new active member
# ARP and the first echo through igb under TCG take seconds. Each wait is one agent call,
# so it stays below the relay's deadline for one call (CALL_TIMEOUT_S, labs._agent_lab).
REPLY_DEADLINE_S = 60.0
FAILOVER_DEADLINE_S = 30.0  # the bond's link monitor runs every monitorIntervalMs
INTERVAL_S = 0.1


def data_path(nic_lab: AgentLab) -> tuple[str, str, int | None]:
    """The topology, the pod's interface that carries the traffic, its VLAN id (None)."""
    if nic_lab.lacks("vlan_on_bond"):
        return "vf-bond", "bond0", None
    step = compiled("vf-bond-vlan").steps["data-vlan"]
    return "vf-bond-vlan", step.interface_names["interface"], int(step.config["vlanId"])


def address(session: Lab, machine: AgentLab, ns: NsRef, name: str, ip: str) -> None:
    """``ip``/``PREFIX`` on the link ``name`` of the session's namespace ``ns``, up."""
    link = session.kernel.get_link(ns, name=name)
    assert link is not None, f"{name} is not in {ns.path}"
    machine.kernel.add_address(ns, name, f"{ip}/{PREFIX}")
    session.kernel.set_link(ns, link.ifindex, LinkChanges(up=True))


# The first sriov case of a run sets the lab up (boot, provisioning: minutes under TCG).
@pytest.mark.timeout(1800)
def test_a_ping_crosses_the_bond_and_survives_failover(
    nic_lab: AgentLab, tmp_path: Path, rig_stats: RigStats
) -> None:
    if nic_lab.peer is None:
        pytest.skip(f"{nic_lab.tier} tier: no traffic check: {nic_lab.no_peer}")
    if len(nic_lab.pfs) < 2:
        pytest.skip(f"{nic_lab.tier} tier: no traffic check: a bond of one VF per PF needs 2 PFs")
    peer_lab, peer_port = nic_lab.peer
    name, interface, vlan = data_path(nic_lab)
    lend = nic_lab.lend_vfs(1)
    labs = {id(nic_lab): nic_lab, id(peer_lab): peer_lab}.values()
    before = {id(lab): (lab.kernel.snapshot(), lab.vf_tables()) for lab in labs}
    peer_side = peer_lab.session(lend={peer_port: PEER_NAME})
    node = Node(tmp_path, nic_lab.session(lend=lend))
    try:
        # A node's NICs are up (its administrator's doing, not a plugin's): a VF passes
        # no traffic through a PF that is down. Lent PFs arrive down; the session's
        # close gives them back as they were.
        k = node.lab.kernel
        node_ns = k.host_namespace()
        for pf in nic_lab.pfs:
            lent_as = lend[pf]
            link = k.get_link(node_ns, name=lent_as)
            assert link is not None, f"{lent_as} ({pf}) is not in the session's node"
            k.set_link(node_ns, link.ifindex, LinkChanges(up=True))
        topology = compiled(name)
        allocations = node.allocator.allocate(topology)
        prepared = node.coordinator.prepare("claim-1", topology, allocations)
        sandbox = node.sandbox("pod-a")
        attached = node.coordinator.connect(
            "att-1", "claim-1", topology, allocations, prepared, sandbox
        )
        assert attached.ready
        pod = k.open_namespace(sandbox.namespace)
        agent = nic_lab.kernel
        peer_node = peer_side.kernel.host_namespace()
        peer_if = PEER_NAME
        if vlan is not None:
            port = peer_side.kernel.get_link(peer_node, name=PEER_NAME)
            assert port is not None
            peer_side.kernel.set_link(peer_node, port.ifindex, LinkChanges(up=True))
            peer_if = f"{PEER_NAME}.{vlan}"
            spec = LinkSpec(kind="vlan", name=peer_if, parent=port.ifindex, vlan_id=vlan)
            peer_side.kernel.create_link(peer_node, spec)
        address(peer_side, peer_lab, peer_node, peer_if, PEER_ADDRESS)
        address(node.lab, nic_lab, pod, interface, POD_ADDRESS)

        def scene() -> str:
            return (
                f"\npod ({pod.path}):\n{agent.describe(pod)}\n"
                f"peer ({peer_node.path}):\n{peer_lab.kernel.describe(peer_node)}"
            )

        ping = agent.start_ping(pod, PEER_ADDRESS, INTERVAL_S)
        try:
            first = agent.await_replies(ping, FIRST_REPLIES, REPLY_DEADLINE_S)
            assert len(first.replied) >= FIRST_REPLIES, (
                f"{name}: {POD_ADDRESS} ({interface}) got {len(first.replied)} replies from "
                f"{PEER_ADDRESS} ({peer_port}) in {REPLY_DEADLINE_S:g} s: the data path is "
                f"broken{scene()}"
            )
            active = agent.await_bond_active(pod, "bond0", "", FAILOVER_DEADLINE_S)
            assert active, "the bond has no active member with traffic flowing"
            member = k.get_link(pod, name=active)
            assert member is not None
            k.set_link(pod, member.ifindex, LinkChanges(up=False))
            took_over = agent.await_bond_active(pod, "bond0", active, FAILOVER_DEADLINE_S)
            assert took_over not in ("", active), (
                f"the bond kept {active} active (or none) {FAILOVER_DEADLINE_S:g} s after "
                "it went down"
            )
            at_failover = len(agent.await_replies(ping, 0, 0).replied)
            after = agent.await_replies(ping, at_failover + AFTER_FAILOVER, REPLY_DEADLINE_S)
        finally:
            seen = agent.stop_ping(ping)
        through_new = len(after.replied) - at_failover
        print(
            f"\n{nic_lab.tier} traffic ({name}, {interface} -> {peer_port}): "
            f"{len(first.replied)} replies first; active {active} -> {took_over}; "
            f"{through_new} replies after failover; {len(seen.replied)} answered and "
            f"{len(seen.missed)} unanswered in all"
        )
        assert through_new >= AFTER_FAILOVER, (
            f"{through_new} replies in {REPLY_DEADLINE_S:g} s after {took_over} took over "
            f"from {active}: traffic did not survive the failover{scene()}"
        )
        rig_stats.add("traffic_checks")
        rig_stats.add("traffic_failovers")
        # The member as the connect left it, so removal restores what it made, not a
        # change of ours.
        k.set_link(pod, member.ifindex, LinkChanges(up=True))
        removed = node.coordinator.remove("att-1")
        assert all(r.status is CleanupStatus.CLEANED for r in removed.values()), removed
        unprepared = node.coordinator.unprepare("claim-1")
        assert all(r.status is CleanupStatus.CLEANED for r in unprepared.values()), unprepared
        node.kernel.delete_namespace("pod-a")
    finally:
        node.close()
        peer_side.close()
    for lab in labs:
        root_before, tables_before = before[id(lab)]
        assert lab.changes_since(root_before) == [], f"{lab.tier}: the machine changed"
        lab.unlearn_vf_addresses(tables_before)
        assert lab.vf_tables() == tables_before, f"{lab.tier}: a PF's VF table changed"
