"""The kernel agent's traffic calls (``labs._traffic``), on this machine's kernel: two
namespaces of a netns lab joined by a veth pair, an address at each end, a ping from one
to the other through the agent's request dispatch. The ping is answered; with the far
end ignoring echo requests it is not, and the misses are counted; bad requests change nothing and say
what is wrong. (The NIC labs run the same calls across a bond of VFs:
tests/e2e/test_nic_lab_traffic.py.)"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from harness.pytest_plugin import require_lab
from labs import NetnsLab, TrafficSide, traffic_missing
from labs.kernel_agent import KernelAgent
from labs.netns import missing
from plugins.kernel import PROTOCOL_VERSION, LinkChanges, LinkSpec

pytestmark = pytest.mark.netns

DEADLINE_S = 30.0
# Read in the namespace of whoever opens it: nsenter opens it inside the far end's.
IGNORE_ECHO = "/proc/sys/net/ipv4/icmp_echo_ignore_all"


@pytest.fixture
def wired(request: pytest.FixtureRequest) -> Iterator[tuple[NetnsLab, KernelAgent]]:
    """A lab with namespaces ``left`` and ``right``, a veth ``l0``-``r0`` between them,
    both up with an address; and an agent serving traffic calls on this machine."""
    require_lab(request.config, "netns", missing() or traffic_missing())

    lab = NetnsLab()
    agent = KernelAgent(lab.kernel, traffic=TrafficSide())
    try:
        k = lab.kernel
        left, right = k.add_namespace("left"), k.add_namespace("right")
        k.create_link(left, LinkSpec(kind="veth", name="l0", peer_name="r0", peer_ns=right))
        for ns, name, address in (
            (left, "l0", "198.51.100.1/24"),
            (right, "r0", "198.51.100.2/24"),
        ):
            link = k.get_link(ns, name=name)
            assert link is not None
            ok(agent, "add_address", ns=ns.path, name=name, address=address)
            k.set_link(ns, link.ifindex, LinkChanges(up=True))
        yield lab, agent
    finally:
        agent.close()
        lab.close()


def ask(agent: KernelAgent, method: str, **params: Any) -> dict[str, Any]:
    return agent.handle(
        json.dumps({"v": PROTOCOL_VERSION, "id": 1, "method": method, "params": params}).encode()
    )


def ok(agent: KernelAgent, method: str, **params: Any) -> Any:
    reply = ask(agent, method, **params)
    assert "error" not in reply, reply
    return reply["result"]


def test_a_ping_is_answered_then_counted_missing_once_the_far_end_stops_answering(
    wired: tuple[NetnsLab, KernelAgent],
) -> None:
    lab, agent = wired
    k = lab.kernel
    left, right = k.namespace("left"), k.namespace("right")
    ping = ok(agent, "start_ping", ns=left.path, address="198.51.100.2", interval_s=0.05)
    answered = ok(agent, "await_replies", ping=ping, count=3, timeout_s=DEADLINE_S)
    assert len(answered["replied"]) >= 3, answered
    scene = ok(agent, "describe", ns=left.path)
    assert "198.51.100.1/24" in scene  # the address, on l0, as ip -br addr shows it
    assert "198.51.100.2 dev l0 lladdr" in scene  # the far end's ARP entry
    # The far end stops answering, its link still up. Setting r0 down would take l0's
    # carrier too: once the kernel's link watch has run (at once, if a second has
    # passed since the link came up) every send fails with ENOBUFS, which ping retries
    # quietly, so it sends nothing it could call unanswered (a CI run saw exactly that).
    subprocess.run(
        ["nsenter", f"--net={right.path}", "sh", "-c", f"echo 1 > {IGNORE_ECHO}"],
        check=True,
        timeout=DEADLINE_S,
    )
    at_down = len(ok(agent, "await_replies", ping=ping, count=0, timeout_s=0.0)["replied"])
    # Replies stop: waiting for two more runs to the deadline and brings at most the
    # one already in flight.
    stalled = ok(agent, "await_replies", ping=ping, count=at_down + 2, timeout_s=1.0)
    assert len(stalled["replied"]) <= at_down + 1, stalled
    seen = ok(agent, "stop_ping", ping=ping)
    assert seen["missed"], f"ping -O named no unanswered request: {seen}"
    assert set(seen["replied"]).isdisjoint(seen["missed"])
    assert ask(agent, "await_replies", ping=ping, count=1, timeout_s=0.0)["error"]["errno"] == 2


def test_bad_traffic_requests_are_named_and_change_nothing(
    wired: tuple[NetnsLab, KernelAgent],
) -> None:
    lab, agent = wired
    left = lab.kernel.namespace("left")
    before = lab.kernel.snapshot()
    cases = [
        (("add_address",), {"ns": left.path, "name": "l0", "address": "not-an-ip"}, 22),
        (("add_address",), {"ns": left.path, "name": "nope", "address": "198.51.100.9/24"}, 19),
        (
            ("start_ping",),
            {"ns": "/run/no-such-ns", "address": "198.51.100.2", "interval_s": 0.1},
            2,
        ),
        (("stop_ping",), {"ping": "ping99"}, 2),
    ]
    for (method,), params, code in cases:
        error = ask(agent, method, **params)["error"]
        assert (error["kind"], error["errno"]) == ("kernel", code), (method, error)
    wrong = ask(agent, "start_ping", ns=left.path, address="198.51.100.2", interval_s=1)["error"]
    assert wrong["message"] == "start_ping takes ns (str), address (str), interval_s (float)"
    assert lab.kernel.snapshot() == before
    assert agent.traffic is not None
    assert agent.traffic.pings == {}
