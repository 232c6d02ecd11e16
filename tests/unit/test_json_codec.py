"""The one dataclass <-> JSON codec: snake_case keys, typed decoding, digests unchanged."""

from __future__ import annotations

import enum
import json
from pathlib import Path

import pytest

from plugins.sdk import (
    ConnectRequest,
    ConnectResponse,
    Grant,
    Hook,
    JSONCodecError,
    PreparedState,
    PrepareRequest,
    ResourceHandle,
    Sharing,
    from_json_value,
    to_json_value,
)
from plugins.sdk.runner import semantic_digest
from tests.factories import SANDBOX, envelope, vf_allocation

HANDLE = ResourceHandle(
    "rh-1", "KernelInterface", "att-1", "vf0", "att-1", "boot-1", "vf0", '{"netns":{"device":4}}'
)
PREPARE = PrepareRequest(
    envelope(Hook.NODE_PREPARE, "claim.vf0", "vf0"), vf_allocation(), '{"vf": {"vlan": 7}}'
)
CONNECT = ConnectRequest(
    envelope(Hook.CONNECT_NETWORK, "att-1", "bond0"),
    SANDBOX,
    '{"mode":"active-backup"}',
    inputs={"members": (HANDLE,)},
    interface_names={"interface": "net1"},
    prepared=PreparedState("vf0", "sriov", "prep-1", (HANDLE,)),
    allocation=vf_allocation(),
    grants=(Grant("link.enslave", "rh-1"), Grant("a.b", "rh-0")),
)


def test_semantic_digests_of_known_requests_are_unchanged() -> None:
    """Pinned before the codecs were merged: journals on disk must keep replaying."""
    assert semantic_digest("sriov/v1alpha1", PREPARE) == (
        "sha256:43c7f006ba891c9f21b9afb1c7815ec98cd9d6ff273302880fc28ed17e36c7d2"
    )
    assert semantic_digest("bond/v1alpha1", CONNECT) == (
        "sha256:ff1a486427b4a8e292e374d600a084500a731bca498ba393ca774b4fd708c293"
    )


def test_keys_are_field_names_as_written() -> None:
    assert to_json_value(HANDLE) == {
        "id": "rh-1",
        "type": "KernelInterface",
        "owner_scope": "att-1",
        "owner_step": "vf0",
        "attachment_id": "att-1",
        "boot_id": "boot-1",
        "root_provenance": "vf0",
        "description_json": '{"netns":{"device":4}}',
    }


@pytest.mark.parametrize(
    ("tp", "value"),
    [
        (PreparedState, PreparedState("vf0", "sriov", "prep-1", (HANDLE,))),
        (ConnectResponse, ConnectResponse({"interface": (HANDLE,)})),
        (ConnectRequest, CONNECT),
        (PrepareRequest, PREPARE),
    ],
)
def test_sdk_values_round_trip(tp: type, value: object) -> None:
    assert from_json_value(tp, json.loads(json.dumps(to_json_value(value)))) == value


def test_enums_are_encoded_by_value_and_decoded_by_type() -> None:
    assert to_json_value(Sharing.SHARED) == "Shared"
    assert from_json_value(Sharing, "Shared") is Sharing.SHARED
    with pytest.raises(JSONCodecError, match=r"^\$: 'shared' is not a Sharing$"):
        from_json_value(Sharing, "shared")


class _Colour(enum.Enum):
    RED = 1


@pytest.mark.parametrize("value", [Path("/x"), {1, 2}, object(), b"bytes"])
def test_what_json_cannot_hold_is_refused(value: object) -> None:
    with pytest.raises(JSONCodecError, match="cannot encode"):
        to_json_value({"a": [value]})
    assert to_json_value(_Colour.RED) == 1


def test_a_field_added_after_a_release_is_left_out_at_its_default() -> None:
    """``added_field``: a value that does not use the field encodes to the release's
    bytes (the release's decoder refuses unknown keys), and reads back with the default."""
    from plugins.kernel import BondInfo, LinkSpec

    plain = LinkSpec(kind="veth", name="v0", peer_name="v1")
    encoded = to_json_value(plain)
    assert "ifindex" not in encoded
    assert "ipvlan_flag" not in encoded
    assert from_json_value(LinkSpec, encoded) == plain
    asked = LinkSpec(kind="ipvlan", name="i0", parent=2, ifindex=40, ipvlan_flag="private")
    assert to_json_value(asked)["ifindex"] == 40
    assert from_json_value(LinkSpec, to_json_value(asked)) == asked
    bond = BondInfo("active-backup", 100)
    assert "fail_over_mac" not in to_json_value(bond)
    assert (
        to_json_value(BondInfo("active-backup", 100, fail_over_mac="follow"))["fail_over_mac"]
        == "follow"
    )
