"""A removal of steps that never ran ends (issue 26): the application is ``removed``, each
step that never ran is reported ``NOT_RUN``, no call is left open, every claim is released,
and the removed application's status keeps no error.

In the coordinator program, a plugin socket serving the wrong plugin is refused before a
call leaves (tests/coordinator/test_program_peers.py). Here the coordinator's requests run
in this process over plain clients that check nothing, so the wrong plugin does receive
the calls: the issue's scenario as it was, ``macvlan`` mapped to the ``vlan`` endpoint,
which refuses NodePrepare and then NodeUnprepare ("not a hook of an Operation-only
plugin"); and a macvlan plugin that refuses NodePrepare itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.inprocess import in_process_node
from harness.scenarios import compiled
from labs import Node
from plugins.coordinator import (
    OPEN_CALL_STATES,
    Allocator,
    ApplyRequest,
    CoordinatorService,
    StepFailed,
)
from plugins.kernel import LinkChanges

from .support import inventory, policies

MACVLAN = compiled("macvlan")
PARENT = "enp3s0f2"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    node = in_process_node(tmp_path / "node")
    yield node
    node.close()


def service_over(node: Node, clients: dict[str, object]) -> CoordinatorService:
    service = CoordinatorService(
        node.journal,
        clients,  # type: ignore[arg-type]  # in-process clients: PluginClient's surface
        {MACVLAN.topology.name: MACVLAN},
        Allocator(inventory(), policies()),
    )
    assert service.recover() == []
    return service


def request(attachment: str, node: Node) -> ApplyRequest:
    claim = attachment.replace("att-", "claim-")
    return ApplyRequest(attachment, claim, MACVLAN.topology.name, node.sandbox())


def removed_cleanly(
    node: Node, service: CoordinatorService, attachment: str, unprepared: str
) -> None:
    """Removed: RemoveNetwork never ran (nothing was connected), NodeUnprepare as given."""
    removed = service.remove(attachment)
    assert removed.state == "removed", removed
    assert [(r.step, r.hook, r.status) for r in removed.receipts] == [
        ("secondary", "RemoveNetwork", "NOT_RUN"),
        ("secondary", "NodeUnprepare", unprepared),
    ]
    # Asked again, the journal answers the same.
    assert service.remove(attachment) == removed
    status = service.status()
    (app,) = status.applications
    assert (app.attachment, app.state, app.error) == (attachment, "removed", "")
    assert status.open_calls == ()
    assert status.claims == ()
    assert [c.operation_id for c in node.journal.calls() if c.state in OPEN_CALL_STATES] == []


def test_macvlan_mapped_to_the_vlan_endpoint_is_removed(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "plugins.coordinator")
    clients = node.clients()
    clients["macvlan"] = clients["vlan"]  # the socket map, without the identity check
    service = service_over(node, clients)
    with pytest.raises(StepFailed) as refused:
        service.apply(request("att-swap", node))
    assert "NodePrepare is not a hook of an Operation-only plugin" in refused.value.message
    # The vlan endpoint refuses NodeUnprepare too, and has no record of the NodePrepare.
    removed_cleanly(node, service, "att-swap", "NOT_RUN")
    # One line per request, with the ids an operator searches by and the outcome.
    ids = f"attachment=att-swap claim=claim-swap sandbox={node.sandbox().sandbox_id}"
    lines = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "plugins.coordinator" and r.getMessage().startswith(("apply ", "remove "))
    ]
    assert [(level, text.split(" duration_ms=")[0]) for level, text in lines] == [
        (
            "WARNING",
            f"apply FAILED_PRECONDITION {ids} topology=sdk-macvlan outcome=FAILED_PRECONDITION",
        ),
        ("INFO", f"remove removed {ids} topology=sdk-macvlan outcome=removed"),
        ("INFO", f"remove removed {ids} topology=sdk-macvlan outcome=removed"),  # asked again
    ]
    assert 'reason="step secondary: NodePrepare failed: FAILED_PRECONDITION' in lines[0][1]
    (prepare,) = [c for c in node.journal.calls() if c.hook == "NodePrepare"]
    assert prepare.state == "abandoned"
    assert prepare.response is not None
    assert prepare.response["was"] == "failed"
    assert prepare.response["neverRan"]["noRecord"] == [prepare.operation_id]


def test_a_plugin_that_refuses_nodeprepare_is_removed(node: Node) -> None:
    kernel = node.kernel
    host = kernel.host_namespace()
    parent = kernel.get_link(host, name=PARENT)
    assert parent is not None
    kernel.set_link(host, parent.ifindex, LinkChanges(mtu=1400))
    service = service_over(node, node.clients())
    with pytest.raises(StepFailed) as refused:
        service.apply(request("att-mtu", node))
    assert f"shared parent {PARENT} has MTU 1400, below the requested 1500" in str(refused.value)
    # The plugin journaled the NodePrepare it refused: its NodeUnprepare cleans it up.
    removed_cleanly(node, service, "att-mtu", "CLEANED")
