"""The generic JSON converter used on both sides of the socket."""

from __future__ import annotations

import json
from typing import Any

import pytest

from plugins.kernel import BondInfo, Link, LinkChanges, LinkSpec, NsRef, VFChanges, VFConfig
from plugins.sdk import JSONCodecError, from_json_value, to_json_value

NS = NsRef(4, 4026531841, "boot", "/run/netns/pod")


@pytest.mark.parametrize(
    "value",
    [
        NS,
        LinkSpec("bond", "bond0", bond=BondInfo("active-backup", 100), parent_ns=NS),
        LinkChanges(master=0, alias=""),
        VFChanges(trust=False, vlan=0),
        VFConfig(3, "02:00:00:00:00:01", spoofchk=None),
        Link(1, "eth0", "device", NS, "02:00:00:00:00:01", 1500, True, vf_of=("0000:03:00.0", 2)),
    ],
)
def test_dataclasses_round_trip_through_json(value: Any) -> None:
    assert from_json_value(type(value), json.loads(json.dumps(to_json_value(value)))) == value


def test_generic_aliases() -> None:
    links = [Link(1, "a", "veth", NS, "02:00:00:00:00:01", 1500, False, peer=2)]
    assert from_json_value(list[Link], to_json_value(links)) == links
    assert from_json_value(dict[str, Any], {"a": [1]}) == {"a": [1]}


@pytest.mark.parametrize(
    ("tp", "value", "message"),
    [
        (NsRef, {"device": 4, "inode": 1, "boot_id": "b", "bogus": 1}, "unknown fields"),
        (NsRef, {"device": 4}, "missing"),
        (NsRef, {"device": "4", "inode": 1, "boot_id": "b"}, "expected int"),
        (NsRef, {"device": True, "inode": 1, "boot_id": "b"}, "expected int"),
        (LinkSpec, {"kind": "tun", "name": "t"}, "is not one of"),
        (VFChanges, {"trust": 1}, "expected bool"),
        (list[NsRef], {"a": 1}, "expected list"),
    ],
)
def test_values_that_do_not_fit_are_rejected(tp: Any, value: Any, message: str) -> None:
    with pytest.raises(JSONCodecError, match=message):
        from_json_value(tp, value)


def test_only_plain_values_encode() -> None:
    with pytest.raises(JSONCodecError):
        to_json_value(object())
