"""The external-change check's judgement, on scripted hosts: an administrator's field
the cleanup overwrites, or a field it sets to a value the host never had, fails it;
restoring what the administrator did not touch passes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from conformance import ConformanceError
from conformance.suite import check_external_change, leaves
from plugins.sdk import CleanupResponse, CleanupStatus


def host(mtu: int, trust: bool) -> dict[str, Any]:
    return {
        "links": [{"id": 1, "name": "vf0", "mtu": mtu}],
        "pfs": [{"pci": "0000:03:00.0", "vfs": [{"vf_index": 0, "trust": trust}]}],
    }


class Scripted:
    """A session whose host goes through the snapshots the check takes, in order: before
    the prepare, after the removal, after the tamper, after the unprepare."""

    operation_only = False

    def __init__(self, hosts: list[dict[str, Any]]) -> None:
        self.hosts = iter(hosts)

    def snapshot(self) -> dict[str, Any]:
        return next(self.hosts)

    def prepare(self) -> None:
        pass

    def connect(self) -> None:
        pass

    def remove(self) -> None:
        pass

    def tamper(self) -> None:
        pass

    def unprepare(self) -> CleanupResponse:
        return CleanupResponse(CleanupStatus.QUARANTINED, "the VF was changed")


class Driver:
    has_tamper = True
    operation_only = False

    def __init__(self, *hosts: dict[str, Any]) -> None:
        self.hosts = list(hosts)

    @contextmanager
    def session(self, label: str, crash: Any = None) -> Iterator[Scripted]:
        yield Scripted(self.hosts)


# The plugin set mtu 1500 and trust on; the administrator turned trust off.
BEGAN, REMOVED, TAMPERED = host(4000, False), host(1500, True), host(1500, False)


def test_restoring_what_the_administrator_left_alone_passes() -> None:
    check_external_change(Driver(BEGAN, REMOVED, TAMPERED, host(4000, False)))  # type: ignore[arg-type]


def test_overwriting_the_administrators_field_fails() -> None:
    with pytest.raises(
        ConformanceError, match=r"overwritten: pfs/pci=0000:03:00\.0/vfs/vf_index=0/trust"
    ):
        check_external_change(Driver(BEGAN, REMOVED, TAMPERED, host(4000, True)))  # type: ignore[arg-type]


def test_a_field_set_to_a_value_the_host_never_had_fails() -> None:
    with pytest.raises(ConformanceError, match="set links/id=1/mtu to 9000"):
        check_external_change(Driver(BEGAN, REMOVED, TAMPERED, host(9000, False)))  # type: ignore[arg-type]


def test_leaves_name_list_elements_by_their_key() -> None:
    assert leaves(host(1500, True)) == {
        ("links", "id=1", "id"): 1,
        ("links", "id=1", "name"): "vf0",
        ("links", "id=1", "mtu"): 1500,
        ("pfs", "pci=0000:03:00.0", "pci"): "0000:03:00.0",
        ("pfs", "pci=0000:03:00.0", "vfs", "vf_index=0", "vf_index"): 0,
        ("pfs", "pci=0000:03:00.0", "vfs", "vf_index=0", "trust"): True,
    }
