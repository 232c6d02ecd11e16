"""The fake lab brings up the kernel server and the three real services."""

from __future__ import annotations

from pathlib import Path

from labs import FakeServerLab, Node


def test_five_endpoints_answer_with_their_own_identity(tmp_path: Path) -> None:
    with Node(FakeServerLab(), tmp_path, processes=True, coordinator=False) as node:
        infos = {name: client.get_info() for name, client in node.clients().items()}
        assert sorted(infos) == ["bond", "ipvlan", "macvlan", "sriov", "vlan"]
        assert all(info.ready for info in infos.values())
        assert {name: info.plugin_name for name, info in infos.items()} == {n: n for n in infos}
        assert len({info.contract_digest for info in infos.values()}) == 5
        links = {infos[n].artifact_digest for n in ("vlan", "ipvlan", "macvlan")}
        assert len(links) == 1  # one artifact, three contracts
