"""snapshot() and diff(): the whole state, comparable and readable."""

from __future__ import annotations

import json

from fakekernel import FakeKernelModel, diff
from plugins.kernel import LinkChanges, NsRef, VFChanges

from .helpers import link, mk


def test_snapshot_is_json_and_stable(m: FakeKernelModel, host: NsRef, pod: NsRef) -> None:
    mk(m, host, "veth", "a", peer_name="b", peer_ns=pod)
    snap = m.snapshot()
    assert json.loads(json.dumps(snap)) == snap
    assert m.snapshot() == snap
    assert [ln["id"] for ln in snap["links"]] == sorted(ln["id"] for ln in snap["links"])
    assert set(snap) == {"boot_id", "live_rename", "namespaces", "links", "pfs"}


def test_equal_snapshots_have_no_diff(m: FakeKernelModel) -> None:
    assert diff(m.snapshot(), m.snapshot()) == []


def test_create_then_delete_leaves_no_trace(m: FakeKernelModel, host: NsRef) -> None:
    before = m.snapshot()
    d = mk(m, host, "dummy", "d0")
    m.delete_link(host, d.ifindex)
    assert diff(before, m.snapshot()) == []


def test_diff_names_what_changed(m: FakeKernelModel, host: NsRef, pod: NsRef) -> None:
    before = m.snapshot()
    v0 = link(m, host, "enp3s0f0v0")
    m.set_link(host, v0.ifindex, LinkChanges(mtu=9000))
    d = mk(m, pod, "dummy", "d0")
    m.set_vf(host, link(m, host, "enp3s0f0").ifindex, 1, VFChanges(vlan=100))
    m.add_namespace("later")
    lines = diff(before, m.snapshot())
    assert (
        f"~ link 'enp3s0f0v0' (device, ifindex {v0.ifindex}) in /proc/1/ns/net: mtu: 1500 -> 9000"
        in lines
    )
    assert f"+ link 'd0' (dummy, ifindex {d.ifindex}) in /run/netns/pod" in lines
    assert "~ vf 0000:03:00.0#1: vlan: 0 -> 100" in lines
    assert "+ namespace /run/netns/later" in lines
    assert len(lines) == 4
    assert diff(m.snapshot(), before) == [  # namespaces, links by ifindex, then VFs
        "- namespace /run/netns/later",
        f"~ link 'enp3s0f0v0' (device, ifindex {v0.ifindex}) in /proc/1/ns/net: mtu: 9000 -> 1500",
        f"- link 'd0' (dummy, ifindex {d.ifindex}) in /run/netns/pod",
        "~ vf 0000:03:00.0#1: vlan: 100 -> 0",
    ]


def test_diff_reports_moves_and_namespace_changes(m: FakeKernelModel, host: NsRef) -> None:
    before = m.snapshot()
    pod = m.add_namespace("pod")
    v0 = link(m, host, "enp3s0f0v0")
    m.move_link(host, v0.ifindex, pod, new_name="eth0")
    lines = diff(before, m.snapshot())
    prefix = f"~ link 'enp3s0f0v0' (device, ifindex {v0.ifindex}) in /proc/1/ns/net"
    assert f"{prefix}: name: 'enp3s0f0v0' -> 'eth0'" in lines
    assert f"{prefix}: ns: '/proc/1/ns/net' -> '/run/netns/pod'" in lines
