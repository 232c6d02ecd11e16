"""ClaimStatusWriter: our status.devices entries by server-side apply, field manager =
the driver."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from lightkube import Client

from harness.k8s.apiserver import APPLY, FakeAPIServer
from plugins.coordinator import DeviceNetwork
from plugins.coordinator.kubeapi import (
    ApiUnavailable,
    ClaimError,
    ClaimStatusWriter,
    DeviceStatus,
    make_client,
)
from plugins.sdk import InvalidArgument
from tests.kubeapi import DRIVER, NODE, attachment, claim_doc, config, result, served

STATUS_PATH = "/apis/resource.k8s.io/v1/namespaces/pods/resourceclaims/claim-a/status"
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[FakeAPIServer]:
    with served(request) as server:
        yield server


@pytest.fixture
def client(api: FakeAPIServer) -> Iterator[Client]:
    with make_client(DRIVER, server=api.url, timeout=5) as c:
        yield c


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def writer(client: Client, clock: Clock) -> ClaimStatusWriter:
    return ClaimStatusWriter(client, DRIVER, clock=clock)


def put(api: FakeAPIServer) -> str:
    doc = claim_doc(
        [result("vf0", shareID="s1"), result("vf1"), result("gpu0", driver="gpu.example.com")],
        [config(attachment())],
    )
    return str(api.put_claim(doc)["metadata"]["uid"])


def devices(api: FakeAPIServer) -> list[dict[str, Any]]:
    claim = api.claim("pods", "claim-a")
    assert claim is not None
    return list(claim["status"].get("devices", []))


def patches(api: FakeAPIServer) -> list[Any]:
    return [r for r in api.requests if r.method == "PATCH"]


def test_report_applies_our_entries_as_the_driver(
    api: FakeAPIServer, writer: ClaimStatusWriter
) -> None:
    uid = put(api)
    network = DeviceNetwork("net", NODE, "vf0", "s1", "net1", "aa:bb:cc:dd:ee:01", ("10.0.0.5/24",))
    writer.report("pods", "claim-a", uid, [DeviceStatus.connected(network)])
    [entry] = devices(api)
    assert entry == {
        "driver": DRIVER,
        "pool": NODE,
        "device": "vf0",
        "shareID": "s1",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "DeviceReady",
                "message": "",
                "lastTransitionTime": "2026-01-02T03:04:05Z",
            },
            {
                "type": "NetworkReady",
                "status": "True",
                "reason": "NetworkReady",
                "message": "",
                "lastTransitionTime": "2026-01-02T03:04:05Z",
            },
        ],
        "networkData": {
            "interfaceName": "net1",
            "ips": ["10.0.0.5/24"],
            "hardwareAddress": "aa:bb:cc:dd:ee:01",
        },
    }
    [patch] = patches(api)
    assert (patch.path, patch.content_type, patch.status) == (STATUS_PATH, APPLY, 200)
    assert "fieldManager=dra.networking" in patch.query
    assert "force=true" in patch.query
    claim = api.claim("pods", "claim-a")
    assert claim is not None
    managers = {
        (m["manager"], m["operation"], m.get("subresource"))
        for m in claim["metadata"]["managedFields"]
    }
    assert (DRIVER, "Apply", "status") in managers


def test_a_condition_keeps_its_transition_time_until_it_changes(
    api: FakeAPIServer, writer: ClaimStatusWriter, clock: Clock
) -> None:
    uid = put(api)
    writer.report("pods", "claim-a", uid, [DeviceStatus(NODE, "vf1")])
    clock.now = T0 + timedelta(minutes=5)
    writer.report(
        "pods",
        "claim-a",
        uid,
        [DeviceStatus(NODE, "vf1", network_ready=False, reason="LinkDown", message="carrier lost")],
    )
    ready, network = devices(api)[0]["conditions"]
    assert (ready["status"], ready["lastTransitionTime"]) == ("True", "2026-01-02T03:04:05Z")
    assert (network["status"], network["reason"], network["message"]) == (
        "False",
        "LinkDown",
        "carrier lost",
    )
    assert network["lastTransitionTime"] == "2026-01-02T03:09:05Z"


def test_reporting_the_same_status_again_changes_nothing(
    api: FakeAPIServer, writer: ClaimStatusWriter, clock: Clock
) -> None:
    uid = put(api)
    writer.report("pods", "claim-a", uid, [DeviceStatus(NODE, "vf1")])
    version = api.version
    clock.now = T0 + timedelta(hours=1)
    writer.report("pods", "claim-a", uid, [DeviceStatus(NODE, "vf1")])
    assert api.version == version  # same entries, same times: a no-op apply


def test_an_apply_drops_what_we_left_out_and_keeps_others_entries(
    api: FakeAPIServer, client: Client, writer: ClaimStatusWriter
) -> None:
    uid = put(api)
    ClaimStatusWriter(client, "gpu.example.com").report(
        "pods", "claim-a", uid, [DeviceStatus(NODE, "gpu0")]
    )
    writer.report(
        "pods", "claim-a", uid, [DeviceStatus(NODE, "vf0", "s1"), DeviceStatus(NODE, "vf1")]
    )
    writer.report("pods", "claim-a", uid, [DeviceStatus(NODE, "vf1")])
    assert sorted((d["driver"], d["device"]) for d in devices(api)) == [
        (DRIVER, "vf1"),
        ("gpu.example.com", "gpu0"),
    ]
    writer.clear("pods", "claim-a", uid)
    assert [(d["driver"], d["device"]) for d in devices(api)] == [("gpu.example.com", "gpu0")]


def test_a_replaced_claim_is_not_written(api: FakeAPIServer, writer: ClaimStatusWriter) -> None:
    uid = put(api)
    new_uid = api.swap_claim_uid("pods", "claim-a")
    with pytest.raises(ClaimError, match=f"expected uid {uid}, found {new_uid}"):
        writer.report("pods", "claim-a", uid, [DeviceStatus(NODE, "vf1")])
    writer.clear("pods", "claim-a", uid)  # the new claim's entries are not the old one's
    assert patches(api) == []


def test_a_claim_replaced_between_read_and_write_is_refused_by_the_server(
    api: FakeAPIServer, client: Client
) -> None:
    uid = put(api)

    class Racing(ClaimStatusWriter):
        """The claim is replaced after the writer read it, before it applies."""

        def _apply(self, *args: Any) -> None:
            api.swap_claim_uid("pods", "claim-a")
            super()._apply(*args)

    with pytest.raises(ClaimError, match="was replaced while its status was written"):
        Racing(client, DRIVER).report("pods", "claim-a", uid, [DeviceStatus(NODE, "vf1")])
    assert [p.status for p in patches(api)] == [409]
    assert devices(api) == []


def test_a_device_the_claim_did_not_allocate_is_refused(
    api: FakeAPIServer, writer: ClaimStatusWriter
) -> None:
    uid = put(api)
    with pytest.raises(ClaimError, match="did not allocate device node-1/vf9"):
        writer.report("pods", "claim-a", uid, [DeviceStatus(NODE, "vf9")])
    with pytest.raises(ClaimError, match=r"did not allocate device node-1/gpu0"):
        writer.report("pods", "claim-a", uid, [DeviceStatus(NODE, "gpu0")])  # another driver's
    assert patches(api) == []


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (DeviceStatus(NODE, "vf1", ips=("10.0.0.5",)), "not in CIDR notation"),
        (DeviceStatus(NODE, "vf1", ips=("10.0.0.300/24",)), "not an address/prefix"),
        (DeviceStatus(NODE, "vf1", ready=False, reason="not camel"), "CamelCase"),
        (DeviceStatus(NODE, "vf1", interface_name="x" * 257), "interface name longer"),
    ],
)
def test_bad_input_is_refused_before_any_request(
    api: FakeAPIServer, writer: ClaimStatusWriter, status: DeviceStatus, message: str
) -> None:
    uid = put(api)
    before = len(api.requests)
    with pytest.raises(InvalidArgument, match=message):
        writer.report("pods", "claim-a", uid, [status])
    with pytest.raises(InvalidArgument, match="reported twice"):
        writer.report("pods", "claim-a", uid, [DeviceStatus(NODE, "vf1")] * 2)
    assert len(api.requests) == before


def test_a_gone_claim_is_an_error_to_report_and_nothing_to_clear(
    api: FakeAPIServer, writer: ClaimStatusWriter
) -> None:
    uid = put(api)
    api.delete_claim("pods", "claim-a")
    with pytest.raises(ClaimError, match="no longer exists"):
        writer.report("pods", "claim-a", uid, [DeviceStatus(NODE, "vf1")])
    writer.clear("pods", "claim-a", uid)
    assert patches(api) == []


def test_an_unavailable_api_server_is_retryable(
    api: FakeAPIServer, writer: ClaimStatusWriter
) -> None:
    uid = put(api)
    api.set_unavailable(True)
    with pytest.raises(ApiUnavailable, match="503"):
        writer.report("pods", "claim-a", uid, [DeviceStatus(NODE, "vf1")])
    with pytest.raises(ApiUnavailable):
        writer.clear("pods", "claim-a", uid)
