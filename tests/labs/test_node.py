"""The kit's Node: built from a lab, services and a crash plan, on any lab."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs import PROJECT_SERVICES, FakeModelLab, FakeServerLab, Node, ServiceSpec, service_of
from plugins.sdk import RegistrationError, Registry


def _refusing_registry() -> Registry:
    raise RegistrationError("this service cannot register")


def test_a_node_that_does_not_come_up_leaves_its_lab_closed(tmp_path: Path) -> None:
    lab = FakeServerLab()
    broken = ServiceSpec("broken", _refusing_registry, sockets=("broken.sock",))
    with pytest.raises(RegistrationError, match="cannot register"):
        Node(lab, tmp_path, services=(broken,))
    assert lab.process.proc is None, "the fake kernel server was left running"
    assert not lab.short_dir.exists()


def test_the_service_table_comes_from_the_registrations() -> None:
    plugins = {spec.name: spec.plugins for spec in PROJECT_SERVICES}
    assert plugins == {
        "networkplugin-vf": ("sriov",),
        "networkplugin-bond": ("bond",),
        "networkplugin-links": ("vlan", "ipvlan", "macvlan"),
    }
    assert service_of("macvlan").name == "networkplugin-links"
    with pytest.raises(KeyError, match="no service serves plugin 'nope'"):
        service_of("nope")


def test_an_in_process_crash_keeps_the_kernel_and_recovers_from_the_journal(
    tmp_path: Path,
) -> None:
    with Node(FakeModelLab(), tmp_path, coordinator=False) as node:
        before = node.snapshot()
        runners = dict(node.services.runners)
        node.crash_services()
        assert node.snapshot() == before
        assert all(node.services.runners[n] is not r for n, r in runners.items())
        assert all(e.info().ready for e in node.endpoints.values())
