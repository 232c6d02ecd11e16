"""Reconcile's categories on a node whose services run in this process (fast).

A macvlan attachment that succeeded is in use (not listed); the same node with its
child deleted by hand shows drift; a link carrying a marker no journal records is an
orphan; after the attachment is removed, a link carrying its marker again is drift.
The journals are read by the CLI's own snapshot (the services hold their locks).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.scenarios import Lifecycle
from labs import FakeModelLab, Node
from plugins.ctl import (
    Contents,
    Finding,
    Service,
    digest,
    findings,
    quarantine_rows,
    read_contents,
    snapshot,
)
from plugins.kernel import LinkChanges, LinkSpec, NsRef
from plugins.sdk import Registry
from plugins.sdk.runner import CrashPoints, SimulatedCrash
from plugins.sdk.service import ServiceConfig
from plugins.sdk.store import LOCK_NAME
from plugins.services import SERVICES

from .kit import MARKED

FOREIGN_MARKER = "dranp:0badf00d:0123456789abcdef"


def _services(node: Node, root: Path) -> list[Service]:
    return [
        Service(
            name,
            root / f"{name}.yaml",
            ServiceConfig(
                socket_dir=root / "sockets" / name,
                state_dir=node.services.state_dir(name),
                token_file=root / "token",
                kernel="kernel+unix:///unused",
            ),
            Registry.of(SERVICES[name]).seal(),
        )
        for name in SERVICES
    ]


def _contents(services: list[Service]) -> list[Contents]:
    found = []
    for service in services:
        with snapshot(service) as snap:
            assert snap.live  # the in-process runners hold their journals
            found.append(read_contents(snap))
    return found


def _pod(node: Node) -> NsRef:
    return next(ns for ns in node.kernel.namespaces() if ns.path.endswith("/pod-a"))


def _rows(found: list[Finding]) -> list[tuple[str, str, str]]:
    return [(f.category, f.why, f.object.split(" (")[0]) for f in found]


@pytest.fixture
def connected(tmp_path: Path) -> Iterator[tuple[Node, Lifecycle, list[Service]]]:
    with Node(FakeModelLab(), tmp_path / "node") as node:
        life = Lifecycle("macvlan", node)
        life.run(0, 2)  # prepare, connect: succeeded
        yield node, life, _services(node, tmp_path)


def test_in_use_is_no_finding(connected: tuple[Node, Lifecycle, list[Service]]) -> None:
    node, _, services = connected
    assert findings(_contents(services), node.kernel) == []


def test_drift_and_orphan(connected: tuple[Node, Lifecycle, list[Service]]) -> None:
    node, _, services = connected
    pod = _pod(node)
    (child,) = [link for link in node.kernel.list_links(pod) if link.name != "eth0"]
    before = digest(findings(_contents(services), node.kernel))

    node.kernel.delete_link(pod, child.ifindex)  # removed by hand under a live attachment
    node.kernel.create_link(pod, LinkSpec(kind="dummy", name="stray0", alias=FOREIGN_MARKER))
    found = findings(_contents(services), node.kernel)
    assert _rows(found) == [
        ("orphan", "no journal of this node records its marker", "dummy stray0"),
        ("drift", "recorded applied, not on the node", "-"),
    ]
    orphan, drift = found
    assert (orphan.marker, orphan.action) == (FOREIGN_MARKER, "none: left for an operator")
    assert (drift.service, drift.scope, drift.effect) == (
        "networkplugin-links",
        "att-1",
        "create-child",
    )
    assert digest(found) != before


def test_an_undone_object_back_on_the_node_is_drift(
    connected: tuple[Node, Lifecycle, list[Service]],
) -> None:
    node, life, services = connected
    pod = _pod(node)
    (child,) = [link for link in node.kernel.list_links(pod) if link.name != "eth0"]
    marker = child.alias
    assert marker is not None
    life.run(2, 3)  # RemoveNetwork: cleaned, the child deleted
    assert findings(_contents(services), node.kernel) == []
    copy = node.kernel.create_link(pod, LinkSpec(kind="dummy", name="again0"))
    node.kernel.set_link(pod, copy.ifindex, LinkChanges(alias=marker))
    assert _rows(findings(_contents(services), node.kernel)) == [
        ("drift", "recorded undone, still on the node", "dummy again0")
    ]


def test_digest_is_stable_and_order_free() -> None:
    a = Finding("leak", "s", "p", "x/v1", "sc", "st", "op", "ConnectNetwork", "e", "Failed/Applying", "o", "m", "w", "a")  # fmt: skip
    b = Finding("orphan", "-", "-", "", "-", "", "-", "", "-", "-", "o2", "m2", "w", "a")
    assert digest([a, b]) == digest([a, b])
    assert digest([a]) != digest([a, b])
    assert digest([]).startswith("sha256:")


def test_a_quarantined_cleanup_is_listed_with_its_reason(
    connected: tuple[Node, Lifecycle, list[Service]],
) -> None:
    """The child replaced by a link of another kind carrying its marker: undo quarantines."""
    node, life, services = connected
    pod = _pod(node)
    (child,) = [link for link in node.kernel.list_links(pod) if link.name != "eth0"]
    node.kernel.delete_link(pod, child.ifindex)
    node.kernel.create_link(pod, LinkSpec(kind="dummy", name="imposter0", alias=child.alias))
    life.run(2, 3)  # RemoveNetwork: QUARANTINED, the imposter left alone
    contents = _contents(services)
    (row,) = quarantine_rows(contents)
    assert (row["service"], row["scope"], row["status"]) == (
        "networkplugin-links",
        "att-1",
        "QUARANTINED",
    )
    assert row["reason"].startswith("create-child: ")
    assert "dummy" in row["reason"]
    assert _rows(findings(contents, node.kernel)) == [
        ("drift", f"quarantined: {row['reason'].removeprefix('create-child: ')}", "dummy imposter0")
    ]


def test_running_is_a_leak_only_while_its_service_is_down(tmp_path: Path) -> None:
    """Interrupted in-process (the runners abandoned as a crash leaves them): while no
    process holds the journal the Running connect is a leak; once one does, it is in
    flight (a running service recovered at start) and not listed."""
    with Node(FakeModelLab(), tmp_path / "node", crash=CrashPoints(armed=MARKED)) as node:
        life = Lifecycle("macvlan", node)
        life.run(0, 1)
        with pytest.raises(SimulatedCrash):
            life.phase("connect")()
        for runner in node.services.runners.values():
            runner.abandon()
        services = _services(node, tmp_path)
        links = next(s for s in services if s.name == "networkplugin-links")
        with snapshot(links) as snap:
            assert not snap.live
            contents = [read_contents(snap)]
        assert [(f.category, f.state) for f in findings(contents, node.kernel)] == [
            ("leak", "Running/Applying")
        ]
        fd = os.open(links.config.state_dir / LOCK_NAME, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with snapshot(links) as snap:
                assert snap.live
                contents = [read_contents(snap)]
        finally:
            os.close(fd)
        assert findings(contents, node.kernel) == []
