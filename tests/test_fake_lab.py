"""The fake lab brings up the kernel server and the three real services."""

from __future__ import annotations

from labs.fake import FakeLab


def test_five_endpoints_answer_with_their_own_identity() -> None:
    with FakeLab() as lab:
        infos = {name: client.get_info() for name, client in lab.clients().items()}
        assert sorted(infos) == ["bond", "ipvlan", "macvlan", "sriov", "vlan"]
        assert all(info.ready for info in infos.values())
        assert {name: info.plugin_name for name, info in infos.items()} == {n: n for n in infos}
        assert len({info.contract_digest for info in infos.values()}) == 5
        links = {infos[n].artifact_digest for n in ("vlan", "ipvlan", "macvlan")}
        assert len(links) == 1  # one artifact, three contracts
