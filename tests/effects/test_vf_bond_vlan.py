"""The blueprint's first topology end to end on the fake kernel, through the real runner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakekernel.model import diff
from plugins.sdk import CleanupStatus

from .node import FakeNode


@pytest.fixture
def node(tmp_path: Path) -> Iterator[FakeNode]:
    n = FakeNode(tmp_path)
    yield n
    n.close()


def test_attach_and_detach_restore_the_kernel_exactly(node: FakeNode) -> None:
    before = node.model.snapshot()
    handles = node.full_attach()
    links = node.sandbox_links()
    assert {"net1", "net2", "bond0", "data0"} <= set(links)
    assert links["net1"].master == links["bond0"].ifindex
    assert links["data0"].vlan_id == 100
    assert links["data0"].parent == links["bond0"].ifindex
    assert handles["bond0"].description()["physical"].startswith("link:dranp:")
    responses = node.full_detach()
    assert [r.status for r in responses] == [CleanupStatus.CLEANED] * 6
    assert diff(before, node.model.snapshot()) == []
